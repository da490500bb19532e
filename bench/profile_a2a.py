"""Profile the daemon's A2A serving path in one process, as ``bench.profile_mcp`` does MCP's.

The daemon's ``/a2a/{agent}`` handler (:class:`mesh.daemon._a2a.DaemonA2a`: the agent check,
then :class:`mesh.a2a.A2aServer`, its task store on disk as ``mesh serve`` keeps it) answers
blocking ``SendMessage`` requests, the bench's own body, by calling the echo agent through a
``MeshOrchestrator`` (the door) over two pipes (the stdio transport). Left out: the HTTP
server under it, which ``bench.profile_http`` measures::

    python -m bench.profile_a2a                       # CPU per served A2A call, both backends
    python -m bench.profile_a2a --inflight 64 --cprofile --backend trio
    python -m bench.profile_a2a --callgrind           # instructions per call (valgrind)

CPU time counts every thread of the process (the task store's journal writes in one);
callgrind counts user-space instructions, which a loaded machine does not move.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from bench._cpu import instructions_per_call
from bench.a2a_scenarios import _HEADERS, COMPLETED, _send
from bench.profile import WARM_CALLS, _pipe_connector, _start, _stop

#: Calls of the shorter callgrind run (the longer makes three times as many): under
#: valgrind a served call takes tens of milliseconds.
CALLGRIND_CALLS = 128

__all__ = ["main", "open_a2a_handler"]

#: One served call: the request's id in, the answer's body out.
Handler = Callable[[int], Awaitable[bytes]]


@contextlib.asynccontextmanager
async def open_a2a_handler() -> AsyncIterator[Handler]:
    """The daemon's A2A handler of the echo agent, as a function of a request id."""
    from mesh import AgentSpec, MeshOrchestrator
    from mesh.agents.echo import agent
    from mesh.daemon._a2a import DaemonA2a
    from mesh.daemon._auth import Identity
    from mesh.daemon._settings import DaemonSettings
    from mesh.daemon._tokens import Role
    from transports import HttpRequest

    spec = AgentSpec("echo", _pipe_connector(agent), transport="stdio")
    who = Identity(Role.ADMIN, "bench", token_id="bench")
    headers = tuple(_HEADERS.items())
    with tempfile.TemporaryDirectory(prefix="profile-a2a-") as data:
        async with MeshOrchestrator([spec]) as mesh, anyio.create_task_group() as tg:
            face = DaemonA2a(mesh.door, DaemonSettings(data_dir=data))
            await tg.start(face.serve)  # the server loads on the first request, as served

            async def handle(call_id: int) -> bytes:
                request = HttpRequest("POST", "/a2a/echo", headers, _send(call_id))
                response = await face.handle_rpc(request, who, {"agent": "echo"})
                body = response.body
                if response.status != 200 or COMPLETED not in body:
                    raise RuntimeError(f"HTTP {response.status}: {body[:200]!r}")
                return body

            yield handle
            tg.cancel_scope.cancel()


async def _calls(n: int, inflight: int, profile: str | None) -> float:
    async with open_a2a_handler() as handle:
        ids = iter(range(10**9))

        async def caller(calls: int) -> None:
            for _ in range(calls):
                await handle(next(ids))

        async def run(calls: int) -> None:
            async with anyio.create_task_group() as tg:
                for _ in range(inflight):
                    tg.start_soon(caller, calls // inflight)

        await run(WARM_CALLS)
        profiler = _start(profile)
        started = time.process_time()
        await run(n)
        took = time.process_time() - started
        _stop(profile, profiler)
    return took


def callgrind_per_call(backend: str, inflight: int, calls: int = CALLGRIND_CALLS) -> float:
    """Instructions per served call (user space, every thread), from two callgrind runs."""

    def command(n: int) -> list[str]:
        return [
            *(sys.executable, "-m", "bench.profile_a2a", "--backend", backend),
            *("--calls", str(n), "--inflight", str(inflight)),
        ]

    return instructions_per_call(command, calls)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_a2a", description=__doc__)
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    parser.add_argument("--calls", type=int, default=3_200)
    parser.add_argument("--inflight", type=int, default=1, help="callers at once")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--pyinstrument", action="store_true")
    parser.add_argument("--callgrind", action="store_true", help="instructions per call")
    args = parser.parse_args(argv)
    profile = "cprofile" if args.cprofile else "pyinstrument" if args.pyinstrument else None
    calls = args.calls // args.inflight * args.inflight
    for backend in ["asyncio", "trio"] if args.backend == "both" else [args.backend]:
        if args.callgrind:
            per_call = callgrind_per_call(backend, args.inflight)
            print(
                f"{backend}: {per_call:,.0f} instructions per served A2A call,"
                f" {args.inflight} in flight"
            )
            continue
        run = functools.partial(_calls, calls, args.inflight, profile)
        took: Any = anyio.run(run, backend=backend)
        print(
            f"{backend}: {took / calls * 1e6:.1f} us CPU per served A2A call,"
            f" {args.inflight} in flight (all ends)"
        )


if __name__ == "__main__":
    main()
