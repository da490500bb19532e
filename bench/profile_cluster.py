"""Profile the cluster's paths by CPU time, which load moves far less than calls/s.

Two cluster members run in this process, as two daemons would, over one
``nats-server -js`` (``mesh.testing.spawn_nats_server``); member ``a`` serves the
echo agent in-process (the memory transport), so what is measured is the
cluster's own cost and nats-py's, not a child's::

    python -m bench.profile_cluster                           # remote calls, one at a time
    python -m bench.profile_cluster --inflight 64 --cprofile  # the top entries by own time
    python -m bench.profile_cluster --path local              # the same call on one member
    python -m bench.profile_cluster --path nats               # bare nats-py request/reply (asyncio)
    python -m bench.profile_cluster --path registry --agents 10000   # a writes, b mirrors
    python -m bench.profile_cluster --path kv --agents 10000   # the same through bare nats-py
    python -m bench.profile_cluster --path crossing --backend trio   # trio -> NATS thread -> trio

It prints this process's CPU per call (both members, and under trio the NATS
thread) and nats-server's. ``--cprofile`` profiles this process's main thread
only (under trio the NATS thread is not in it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from bench.profile import _start

if TYPE_CHECKING:
    from mesh import MeshOrchestrator
    from mesh.testing import NatsServer

ARGUMENTS = {"message": "hello, agent mesh"}
WARM_CALLS = 300


def _stop(profile: str | None, profiler: object) -> None:
    """As bench.profile's, sorted by ``$PROFILE_SORT`` (``tottime``; or ``cumulative``)."""
    if profile != "cprofile":
        from bench.profile import _stop as stop

        stop(profile, profiler)
        return
    import cProfile
    import pstats

    assert isinstance(profiler, cProfile.Profile)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats(os.environ.get("PROFILE_SORT", "tottime")).print_stats(40)


def _tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants (nats-server runs under ``timeout``)."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                stack.extend(int(c) for c in children)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def _server_cpu(server: NatsServer) -> float:
    return 0.0 if server.process is None else _tree_cpu(server.process.pid)


@contextlib.asynccontextmanager
async def _open_pair() -> AsyncIterator[tuple[NatsServer, MeshOrchestrator, MeshOrchestrator]]:
    from bench.cluster_scenarios import _wait_for
    from mesh import AgentSpec, MeshOrchestrator, local_connector
    from mesh.agents.echo import agent
    from mesh.cluster import ClusterRegistry, ClusterSettings, open_cluster
    from mesh.testing import spawn_nats_server

    spec = AgentSpec("echo", local_connector(agent))
    async with spawn_nats_server() as nats:
        settings = ClusterSettings(nats=nats.url)
        async with (
            MeshOrchestrator([spec], registry=ClusterRegistry()) as a,
            open_cluster(a, settings.with_daemon("a")),
            MeshOrchestrator(registry=ClusterRegistry()) as b,
            open_cluster(b, settings.with_daemon("b")),
        ):
            await _wait_for(b, "echo")
            yield nats, a, b


async def _drive(call: Callable[[], Awaitable[Any]], n: int, inflight: int) -> None:
    if inflight <= 1:
        for _ in range(n):
            await call()
        return
    left = n

    async def caller() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await call()

    async with anyio.create_task_group() as tg:
        for _ in range(inflight):
            tg.start_soon(caller)


async def _measured(
    call: Callable[[], Awaitable[Any]], server: NatsServer, args: argparse.Namespace
) -> None:
    await _drive(call, WARM_CALLS, args.inflight)
    profiler = _start(args.profile)
    cpu, nats_cpu, wall = time.process_time(), _server_cpu(server), time.perf_counter()
    await _drive(call, args.calls, args.inflight)
    wall = time.perf_counter() - wall
    cpu, nats_cpu = time.process_time() - cpu, _server_cpu(server) - nats_cpu
    _stop(args.profile, profiler)
    per = 1e6 / args.calls
    print(
        f"{args.backend} {args.path} x{args.inflight}: {cpu * per:.1f} us CPU per call here, "
        f"{nats_cpu * per:.1f} us in nats-server; {args.calls / wall:,.0f} calls/s"
    )


async def _calls(args: argparse.Namespace) -> None:
    from mesh import EMBEDDER  # the door refuses a call that names nobody it is made for
    from mesh._logging import configure_logging

    configure_logging(level="warning", stream=sys.stderr, json=True)
    async with _open_pair() as (nats, a, b):
        mesh = a if args.path == "local" else b

        async def call() -> None:
            await mesh.call_tool("echo", "echo", ARGUMENTS, on_behalf_of=EMBEDDER)

        await _measured(call, nats, args)


async def _bare(args: argparse.Namespace) -> None:
    import msgspec
    import nats as nats_py

    from mesh.testing import spawn_nats_server

    payload = msgspec.json.encode({"name": "echo", "arguments": ARGUMENTS})
    async with spawn_nats_server() as server:
        nc = await nats_py.connect(server.url)
        responder = await nats_py.connect(server.url)

        async def respond(msg: Any) -> None:
            await msg.respond(msgspec.json.encode(msgspec.json.decode(msg.data)))

        await responder.subscribe("bench.echo", cb=respond)
        await responder.flush()

        async def call() -> None:
            reply = await nc.request("bench.echo", payload, timeout=10)
            msgspec.json.decode(reply.data)

        try:
            await _measured(call, server, args)
        finally:
            await nc.close()
            await responder.close()


async def _registry(args: argparse.Namespace) -> None:
    from bench.cluster_scenarios import _wait_for
    from mesh import MeshOrchestrator
    from mesh._logging import configure_logging
    from mesh.cluster import ClusterRegistry, ClusterSettings, open_cluster
    from mesh.testing import spawn_nats_server
    from registry import AgentId, AgentRecord

    configure_logging(level="warning", stream=sys.stderr, json=True)
    n = args.agents
    async with spawn_nats_server() as nats:
        settings = ClusterSettings(nats=nats.url)
        async with (
            MeshOrchestrator(registry=ClusterRegistry()) as a,
            open_cluster(a, settings.with_daemon("a")),
            MeshOrchestrator(registry=ClusterRegistry()) as b,
            open_cluster(b, settings.with_daemon("b")),
        ):
            profiler = _start(args.profile)
            cpu, nats_cpu, wall = time.process_time(), _server_cpu(nats), time.perf_counter()
            now = anyio.current_time()
            for i in range(n):
                a.registry.register(AgentRecord(id=AgentId(f"agent-{i}"), name=f"a{i}"), now)
            await _wait_for(b, "agent-", n)
            wall = time.perf_counter() - wall
            cpu, nats_cpu = time.process_time() - cpu, _server_cpu(nats) - nats_cpu
            _stop(args.profile, profiler)
    per = 1e6 / n
    print(
        f"{args.backend} registry {n}: {n / wall:,.0f} agents/s mirrored; {cpu * per:.1f} us "
        f"CPU per agent here, {nats_cpu * per:.1f} us in nats-server"
    )


async def _kv(args: argparse.Namespace) -> None:
    """The registry's floor: bench's ``kv-raw`` (bare nats-py, asyncio), timed the same way."""
    from bench._registry import RunContext
    from bench.cluster_scenarios import kv_raw

    ctx = RunContext(mode=f"agents{args.agents}", backend="asyncio", duration=0.0, warmup=0.0)
    profiler = _start(args.profile)
    cpu = time.process_time()
    figures = (await kv_raw(ctx)).figures()
    cpu = time.process_time() - cpu
    _stop(args.profile, profiler)
    print(
        f"asyncio kv {args.agents}: {figures['mirrored_per_s']:,.0f} agents/s mirrored; "
        f"{cpu * 1e6 / args.agents:.1f} us CPU per agent here (nats-server's start included)"
    )


async def _crossing(args: argparse.Namespace) -> None:
    """trio only: one operation run on the NATS thread and its result back, n times."""
    from mesh.cluster._bridge import open_nats_loop

    async def nothing() -> None:
        return None

    async with open_nats_loop() as loop:
        for _ in range(WARM_CALLS):
            await loop.run(nothing)
        cpu, wall = time.process_time(), time.perf_counter()
        await _drive(lambda: loop.run(nothing), args.calls, args.inflight)
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
    print(
        f"{args.backend} crossing x{args.inflight}: {cpu / args.calls * 1e6:.1f} us CPU, "
        f"{wall / args.calls * 1e6:.1f} us wall per round trip to the NATS loop"
    )


PATHS = {"remote": _calls, "local": _calls, "nats": _bare, "registry": _registry, "kv": _kv}
PATHS["crossing"] = _crossing


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_cluster", description=__doc__)
    parser.add_argument("--path", choices=sorted(PATHS), default="remote")
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    parser.add_argument("--calls", type=int, default=5_000)
    parser.add_argument("--inflight", type=int, default=1)
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--pyinstrument", action="store_true")
    args = parser.parse_args(argv)
    args.profile = "cprofile" if args.cprofile else "pyinstrument" if args.pyinstrument else None
    backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    if args.path in ("nats", "kv"):
        backends = ["asyncio"]  # nats-py has no trio
    for backend in backends:
        args.backend = backend
        anyio.run(PATHS[args.path], args, backend=backend)


if __name__ == "__main__":
    main()
