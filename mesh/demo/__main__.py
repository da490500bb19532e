"""``make demo``: the mesh doing its job, narrated.

First the SDK (:mod:`mesh.demo._sdk_tour`), once on asyncio and once on trio;
then the daemon (:mod:`mesh.demo._daemon_tour`), MCP both ways
(:mod:`mesh.demo._mcp_tour`), A2A both ways (:mod:`mesh.demo._a2a_tour`), two offline
rooms (:mod:`mesh.demo._rooms_tour`), and last one call's trace as a tree
(:mod:`mesh.demo._trace_tour`).
``python -m mesh.demo cluster`` (``make demo-cluster``) is three daemons over NATS
instead (:mod:`mesh.demo._cluster_tour`).
Exits non-zero if anything does not behave.
"""

from __future__ import annotations

import sys

import anyio

from mesh._logging import configure_logging
from mesh.demo._a2a_tour import a2a_tour
from mesh.demo._daemon_tour import daemon_tour
from mesh.demo._mcp_tour import mcp_tour
from mesh.demo._rooms_tour import rooms_tour
from mesh.demo._sdk_tour import say, tour
from mesh.demo._trace_tour import trace_tour


def main() -> None:
    configure_logging(level="warning")  # the narration is the output; logs only if something is off
    if sys.argv[1:] == ["cluster"]:
        from mesh.demo._cluster_tour import cluster_tour

        anyio.run(cluster_tour)
        return
    for backend in ("asyncio", "trio"):
        anyio.run(tour, backend, backend=backend)
    anyio.run(daemon_tour)
    anyio.run(mcp_tour)
    anyio.run(a2a_tour, backend="trio")
    anyio.run(rooms_tour, backend="trio")
    anyio.run(trace_tour)
    say("\ndemo finished: every call behaved.")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
