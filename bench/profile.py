"""Profile the mesh's in-process call path with instruments that load does not move.

``mesh-memory`` has no I/O: a call is the mesh's own Python and nothing else, so
it is where the core's cost per call is measured and cut::

    python -m bench.profile                         # CPU time per call, both backends
    python -m bench.profile --callgrind             # instructions per call (valgrind)
    python -m bench.profile --cprofile --backend trio  # the top entries by own time
    python -m bench.profile --pyinstrument

CPU time (``time.process_time``) counts only this process's work; callgrind
counts instructions, the same for the same code whatever else the machine runs:
it runs the loop twice (N and 3N calls) under valgrind and divides the
difference, so start-up and imports cancel out.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import sniffio

from bench._cpu import instructions_per_call

if TYPE_CHECKING:
    from mesh import Agent, MeshOrchestrator, Peer
    from transports import Connector, FrameStream

__all__ = ["callgrind_per_call", "main"]

ARGUMENTS = {"message": "hello, agent mesh"}
#: Calls before timing: imports, caches and the first allocations settle.
WARM_CALLS = 500
CALLGRIND_CALLS = 1500


@contextlib.asynccontextmanager
async def _open_link(transport: str) -> AsyncIterator[Peer]:
    """A peer to the echo agent served in this process: over memory, or loopback WebSocket."""
    from mesh import open_agent_server, open_websocket_peer
    from mesh.agents.echo import agent
    from mesh.testing import open_memory_peer

    if transport == "memory":
        async with open_memory_peer(agent) as peer:
            yield peer
        return
    if transport == "pingpong":
        from bench.baselines.loop_pingpong import open_pingpong

        async with open_pingpong(sniffio.current_async_library()) as call:
            yield _PingPong(call)  # type: ignore[misc]
        return
    if transport == "pipe":
        async with _pipe_link(agent) as peer:
            yield peer
        return
    async with (
        open_agent_server(agent) as server,
        open_websocket_peer(f"{server.ws_url}/ws", agent="echo") as peer,
    ):
        yield peer


@contextlib.asynccontextmanager
async def _pipe_link(agent: Agent) -> AsyncIterator[Peer]:
    """The stdio transport's both ends in this process: two pipes, one LineChannel each way."""
    from mesh import open_peer, serve_peer
    from transports._lines import LineChannel
    from transports._stdio import StdioServerStream

    to_agent, to_caller = os.pipe(), os.pipe()
    limit = 1 << 20
    served = StdioServerStream(LineChannel(to_agent[0], to_caller[1], max_frame_size=limit))
    caller = StdioServerStream(LineChannel(to_caller[0], to_agent[1], max_frame_size=limit))
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_peer, served, agent)
        async with open_peer(caller, agent="echo") as peer:
            yield peer
        tg.cancel_scope.cancel()
    await served.aclose()
    await caller.aclose()


class _PingPong:
    """The physical limit (bench/baselines/loop_pingpong.py) behind ``call_tool``."""

    def __init__(self, call: Callable[[], Awaitable[None]]) -> None:
        self._call = call

    async def call_tool(self, name: str, arguments: dict[str, str]) -> Any:
        return await self._call()


class _Through:
    """Calls the echo agent through an orchestrator, as ``peer.call_tool`` would."""

    def __init__(self, mesh: MeshOrchestrator) -> None:
        from mesh import EMBEDDER  # the door refuses a call that names nobody it is made for

        self._mesh = mesh
        self._for = EMBEDDER

    async def call_tool(self, name: str, arguments: dict[str, str]) -> Any:
        return await self._mesh.call_tool("echo", name, arguments, on_behalf_of=self._for)


def _pipe_connector(agent: Agent) -> Connector:
    """A connector to ``agent`` served in this process over two pipes (the stdio transport)."""

    @contextlib.asynccontextmanager
    async def connect() -> AsyncIterator[FrameStream]:
        from mesh import serve_peer
        from transports._lines import LineChannel
        from transports._stdio import StdioServerStream

        to_agent, to_caller = os.pipe(), os.pipe()
        limit = 1 << 20
        served = StdioServerStream(LineChannel(to_agent[0], to_caller[1], max_frame_size=limit))
        caller = StdioServerStream(LineChannel(to_caller[0], to_agent[1], max_frame_size=limit))
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_peer, served, agent)
            yield caller
            tg.cancel_scope.cancel()
        await served.aclose()
        await caller.aclose()

    return connect


@contextlib.asynccontextmanager
async def _open_caller(transport: str, hooks: str | None) -> AsyncIterator[Any]:
    """The link as it is, or (``hooks``) a ``MeshOrchestrator`` over it, the call path's
    hook in place: ``bare`` without it, ``on`` as shipped (tracing off), ``sdk`` with
    every call sampled (see bench/observe_scenarios.py)."""
    if hooks is None:
        async with _open_link(transport) as peer:
            yield peer
        return
    from bench.observe_scenarios import prepare
    from mesh import AgentSpec, MeshOrchestrator, local_connector
    from mesh.agents.echo import agent

    prepare(hooks)
    if transport == "memory":
        spec = AgentSpec("echo", local_connector(agent))
    elif transport == "pipe":
        spec = AgentSpec("echo", _pipe_connector(agent), transport="stdio")
    else:
        raise SystemExit("--hooks measures over memory or pipe")
    async with MeshOrchestrator([spec]) as mesh:
        yield _Through(mesh)


async def _calls(
    n: int, *, profile: str | None = None, transport: str = "memory", hooks: str | None = None
) -> float:
    """Run `n` sequential ``tools/call echo`` on one link; the CPU seconds they took."""
    async with _open_caller(transport, hooks) as peer:
        for _ in range(WARM_CALLS):
            await peer.call_tool("echo", ARGUMENTS)
        profiler = _start(profile)
        started = time.process_time()
        for _ in range(n):
            await peer.call_tool("echo", ARGUMENTS)
        took = time.process_time() - started
        _stop(profile, profiler)
    return took


async def _links(n: int, *, profile: str | None = None) -> float:
    """Open `n` WebSocket links to the echo agent served in this process, 50 at a time,
    and hold them; a link is up once ``open_websocket_peer`` returns (``agent/info``
    answered). The CPU seconds until all are up, both ends (what ``mesh-idle`` meters
    per link); closing them is not counted."""
    from mesh import open_agent_server, open_websocket_peer
    from mesh.agents.echo import agent

    async def open_many(url: str, count: int, profile: str | None) -> float:
        limiter = anyio.Semaphore(50)
        all_up, release = anyio.Event(), anyio.Event()
        left = [count]

        async def link() -> None:
            async with limiter:
                opening = open_websocket_peer(url, agent="echo")
                await opening.__aenter__()
            left[0] -= 1
            if left[0] == 0:
                all_up.set()
            try:
                await release.wait()
            finally:
                await opening.__aexit__(None, None, None)

        async with anyio.create_task_group() as tg:
            # As the crowd does: with thousands of links held, the cyclic GC's passes
            # over them, not the links, would be what is measured.
            gc.collect()
            gc.disable()
            profiler = _start(profile)
            started = time.process_time()
            for _ in range(count):
                tg.start_soon(link)
            await all_up.wait()
            took = time.process_time() - started
            _stop(profile, profiler)
            gc.enable()
            release.set()
        return took

    from transports import HttpServerConfig

    many = HttpServerConfig(max_connections=n + 1000)  # the default admits 1,000
    async with open_agent_server(agent, http_config=many) as server:
        url = f"{server.ws_url}/ws"
        await open_many(url, 200, None)
        return await open_many(url, n, profile)


async def _broadcasts(n: int, *, peers: int = 1000, profile: str | None = None) -> float:
    """Broadcast `n` notifications to `peers` WebSocket peers, server and crowd in this
    process, one at a time (each once every peer's handler ran). The CPU seconds the
    broadcasts took, both ends (``mesh-broadcast`` meters each end on its own)."""
    from mesh import Agent, Peer, open_agent_server, open_websocket_peer
    from transports import HttpServerConfig

    agent = Agent("crowd")
    recipients: list[Peer] = []

    @agent.method("join")
    def join(ctx: Any, params: Any) -> None:
        recipients.append(ctx.peer)

    class Crowd:
        def __init__(self) -> None:
            self.left = 0
            self.done = anyio.Event()

        async def handle_request(self, ctx: Any, method: str, params: Any) -> Any:
            raise NotImplementedError(method)

        def handle_notification(self, peer: Any, method: str, params: Any) -> None:
            self.left -= 1
            if self.left == 0:
                self.done.set()

    crowd = Crowd()

    async def broadcast() -> None:
        crowd.left, crowd.done = len(recipients), anyio.Event()
        Peer.broadcast_nowait(recipients, "stamp", {"seq": 1, "t0": time.monotonic()})
        await crowd.done.wait()

    async def hold(url: str, up: anyio.Event, release: anyio.Event) -> None:
        async with open_websocket_peer(url, agent="crowd", handler=crowd) as peer:
            await peer.call("join")
            up.set()
            await release.wait()

    many = HttpServerConfig(max_connections=peers + 100)
    async with open_agent_server(agent, http_config=many) as server:
        release = anyio.Event()
        async with anyio.create_task_group() as tg:
            for _ in range(peers):
                up = anyio.Event()
                tg.start_soon(hold, f"{server.ws_url}/ws", up, release)
                await up.wait()
            for _ in range(20):
                await broadcast()
            gc.collect()
            gc.disable()
            profiler = _start(profile)
            started = time.process_time()
            for _ in range(n):
                await broadcast()
            took = time.process_time() - started
            _stop(profile, profiler)
            gc.enable()
            release.set()
    return took


def _start(profile: str | None) -> object:
    if profile == "cprofile":
        import cProfile

        cprofiler = cProfile.Profile()
        cprofiler.enable()
        return cprofiler
    if profile == "pyinstrument":
        from pyinstrument import Profiler

        instrument = Profiler(interval=0.0001, async_mode="disabled")
        instrument.start()
        return instrument
    return None


def _stop(profile: str | None, profiler: object) -> None:
    if profile == "cprofile":
        import cProfile
        import pstats

        assert isinstance(profiler, cProfile.Profile)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(30)
    elif profile == "pyinstrument":
        from pyinstrument import Profiler

        assert isinstance(profiler, Profiler)
        profiler.stop()
        print(profiler.output_text(unicode=False, show_all=False))


def callgrind_per_call(
    backend: str, calls: int = CALLGRIND_CALLS, transport: str = "memory", hooks: str | None = None
) -> float:
    """Instructions per call on `backend` (user space, both ends), from two callgrind runs."""

    def command(n: int) -> list[str]:
        return [
            *(sys.executable, "-m", "bench.profile", "--backend", backend, "--calls", str(n)),
            *("--transport", transport, *(["--hooks", hooks] if hooks else []), "--quiet"),
        ]

    return instructions_per_call(command, calls)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument(
        "--transport",
        choices=["memory", "pipe", "websocket", "pingpong"],
        default="memory",
        help="pipe: the stdio transport's two ends over os.pipe(); websocket: the echo agent's"
        " server and a peer in this process, over loopback; pingpong: no mesh, the physical limit"
        " (two tasks handing a JSON message over the loop's own wake-up)",
    )
    parser.add_argument(
        "--hooks",
        choices=["bare", "on", "sdk"],
        help="call through a MeshOrchestrator: its observability hook taken out (bare), as"
        " shipped with tracing off (on), or every call sampled by the OpenTelemetry SDK (sdk)",
    )
    parser.add_argument(
        "--links",
        type=int,
        help="open this many WebSocket links (server and peers in this process) instead of"
        " calling: CPU per link opened, both ends",
    )
    parser.add_argument(
        "--broadcasts",
        type=int,
        help="broadcast this many times to 1,000 WebSocket peers (server and crowd in this"
        " process) instead of calling: CPU per broadcast, both ends",
    )
    parser.add_argument("--callgrind", action="store_true", help="instructions per call")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--pyinstrument", action="store_true")
    parser.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    os.environ.setdefault("PYTHONHASHSEED", "0")
    for backend in backends:
        if args.callgrind:
            per_call = callgrind_per_call(backend, transport=args.transport, hooks=args.hooks)
            how = f" through the orchestrator (hooks {args.hooks})" if args.hooks else ""
            print(f"{backend}: {per_call:,.0f} instructions per call over {args.transport}{how}")
            continue
        profile = "cprofile" if args.cprofile else "pyinstrument" if args.pyinstrument else None
        if args.broadcasts:
            fanning = functools.partial(_broadcasts, args.broadcasts, profile=profile)
            took = anyio.run(fanning, backend=backend)
            print(f"{backend}: {took / args.broadcasts * 1e6:.0f} us CPU per broadcast to 1,000")
            continue
        if args.links:
            opening = functools.partial(_links, args.links, profile=profile)
            took = anyio.run(opening, backend=backend)
            print(f"{backend}: {took / args.links * 1e6:.0f} us CPU per link opened (both ends)")
            continue
        run = functools.partial(
            _calls, args.calls, profile=profile, transport=args.transport, hooks=args.hooks
        )
        took = anyio.run(run, backend=backend)
        if not args.quiet:
            per_call = took / args.calls * 1e6
            print(f"{backend}: {per_call:.1f} us CPU per call over {args.transport} (both ends)")


if __name__ == "__main__":
    main()
