"""Profile the daemon's MCP serving path in one process, as ``bench.profile`` does the core.

An MCP client on a memory pair to :func:`mesh.mcp.serve_mcp`, whose catalog calls the
echo agent through a ``MeshOrchestrator`` (the door, for a client token, authorized as
the daemon does) over two pipes (the stdio transport). Left out: ``mesh mcp``'s relay
and the daemon's WebSocket, which ``bench.profile --transport websocket`` measures::

    python -m bench.profile_mcp                      # CPU time per served call, both backends
    python -m bench.profile_mcp --cprofile --backend asyncio
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from bench.profile import WARM_CALLS, _pipe_connector, _start, _stop

__all__ = ["main", "open_mcp_client"]

_HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "p"}}
_CALL = {"name": "echo__echo", "arguments": {"message": "hello, agent mesh"}}


@contextlib.asynccontextmanager
async def open_mcp_client() -> AsyncIterator[Any]:
    """An initialized MCP client (a ``Peer`` with the MCP codec) of the serving path."""
    from mesh import AgentSpec, MeshOrchestrator, open_peer
    from mesh._orchestrator.access import Principal
    from mesh.agents.echo import agent
    from mesh.mcp import MCP_CODEC, ToolCatalog, serve_mcp
    from transports import memory_stream_pair

    spec = AgentSpec("echo", _pipe_connector(agent), transport="stdio")
    async with MeshOrchestrator([spec]) as mesh:
        catalog = ToolCatalog(mesh)
        catalog.attach()
        who = Principal.client("bench", admin=True)

        def authorize(agent_id: str | None, tool: str) -> None:
            if agent_id is not None:
                mesh.authorize(agent_id, "tools/call", on_behalf_of=who)

        client_end, server_end = memory_stream_pair()
        serve = functools.partial(serve_mcp, authorize=authorize, on_behalf_of=who)
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve, server_end, catalog)
            async with open_peer(client_end, codec=MCP_CODEC) as client:
                await client.call("initialize", _HELLO)
                client.notify_nowait("notifications/initialized")
                await client.call("tools/list")
                yield client
            tg.cancel_scope.cancel()


async def _calls(n: int, profile: str | None) -> float:
    async with open_mcp_client() as client:
        for _ in range(WARM_CALLS):
            await client.call("tools/call", _CALL)
        profiler = _start(profile)
        started = time.process_time()
        for _ in range(n):
            await client.call("tools/call", _CALL)
        took = time.process_time() - started
        _stop(profile, profiler)
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_mcp", description=__doc__)
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    parser.add_argument("--calls", type=int, default=5_000)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--pyinstrument", action="store_true")
    args = parser.parse_args(argv)
    profile = "cprofile" if args.cprofile else "pyinstrument" if args.pyinstrument else None
    for backend in ["asyncio", "trio"] if args.backend == "both" else [args.backend]:
        took = anyio.run(functools.partial(_calls, args.calls, profile), backend=backend)
        print(f"{backend}: {took / args.calls * 1e6:.1f} us CPU per served MCP call (all ends)")


if __name__ == "__main__":
    main()
