"""The mesh's own scenarios: RPC over each transport, broadcast, idle links, the registry.

RPC (``mesh-memory``, ``mesh-stdio``, ``mesh-ws``, ``mesh-http``): ``tools/call``
of the live echo agent (``python -m mesh.agents.echo``), one `mesh.Peer` shared
by all callers (one connection; over HTTP the peer's own pool of keep-alive
connections). The agent runs on the same backend as the client, so a trio row
is the mesh on trio end to end. ``mesh-memory`` serves the agent in this
process over the in-memory link: the mesh's own per-call cost, no I/O.

``mesh-broadcast`` and ``mesh-idle`` use `bench.mesh_crowd` (a server process
with ``open_agent_server`` and a crowd process of ``open_websocket_peer`` peers).
``registry`` times `registry.Registry` in this process.

The mesh, httpx, structlog and registry are imported inside the scenarios: every
measurement process imports this module.
"""

from __future__ import annotations

import contextlib
import gc
import os
import random
import re
import sys
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from bench._children import ENV_TWEAKS, REPO_ROOT, open_server
from bench._measure import measure_calls
from bench._registry import Measurement, RunContext, scenario

if TYPE_CHECKING:
    from mesh import Peer

#: The echo agent prints one JSON line once it listens (`mesh._sdk.runner`).
LISTENING_LINE = re.compile(rb'\{"event": "listening", "http": "http://[^"]*:(\d+)".*\}')
#: mesh-idle opens links this many at a time and stops after IDLE_BUDGET_S (on a
#: loaded 2-core machine the agent server's cyclic GC can make 10,000 take minutes).
IDLE_STEP = 1000
IDLE_BUDGET_S = 150.0
#: What every call sends: the same text the MCP baseline echoes.
ARGUMENTS = {"message": "hello, agent mesh"}


def quiet_logs() -> None:
    """Configure structlog as an application would (warnings, to stderr).

    Unconfigured, structlog prints every level, debug included, to stdout.
    """
    from mesh._logging import configure_logging

    configure_logging(level="warning", stream=sys.stderr, json=True)


def echo_agent_args(backend: str, *transport: str) -> list[str]:
    return ["-m", "mesh.agents.echo", *transport, "--backend", backend, "--log-level", "warning"]


def stdio_env() -> dict[str, str]:
    """What the stdio agent gets: the mesh passes a child only a base environment."""
    env = {k: os.environ[k] for k in ENV_TWEAKS if k in os.environ}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


async def measure_peer(peer: Peer, ctx: RunContext) -> Measurement:
    """``tools/call echo`` on one peer; the first answer is checked, not timed."""
    first = await peer.call_tool("echo", ARGUMENTS)
    if first != ARGUMENTS:
        raise RuntimeError(f"echo answered {first!r}")

    async def call() -> None:
        await peer.call_tool("echo", ARGUMENTS)

    result = await measure_calls(call, ctx)
    result.notes["agent_backend"] = ctx.backend
    return result


@contextlib.asynccontextmanager
async def open_echo_server(backend: str) -> AsyncIterator[int]:
    """The echo agent serving HTTP ``/rpc`` and WebSocket ``/ws`` on one port; yields it."""
    command = [sys.executable, *echo_agent_args(backend, "--http", "127.0.0.1:0")]
    async with open_server(command, port_line=LISTENING_LINE) as server:
        yield server.port


@scenario(
    "mesh-memory",
    group="in-process",
    baseline="loop-pingpong",
    description="mesh RPC, agent in-process (no I/O)",
    smoke_modes=("sequential",),
)
async def mesh_memory(ctx: RunContext) -> Measurement:
    from mesh.agents.echo import agent
    from mesh.testing import open_memory_peer

    quiet_logs()
    async with open_memory_peer(agent) as peer:
        return await measure_peer(peer, ctx)


@scenario(
    "mesh-stdio",
    group="stdio",
    baseline=("pipe-raw", "mcp-stdio"),
    description="mesh RPC over stdio to the echo agent",
    smoke_modes=("sequential",),
)
async def mesh_stdio(ctx: RunContext) -> Measurement:
    import mesh

    quiet_logs()
    args = echo_agent_args(ctx.backend, "--stdio")
    async with mesh.open_stdio_peer(
        sys.executable, args, env=stdio_env(), cwd=REPO_ROOT, agent="echo"
    ) as peer:
        return await measure_peer(peer, ctx)


@scenario(
    "mesh-ws",
    group="websocket",
    baseline="ws-raw",
    description="mesh RPC over WebSocket to the echo agent",
    smoke_modes=("sequential",),
)
async def mesh_ws(ctx: RunContext) -> Measurement:
    import mesh

    quiet_logs()
    async with (
        open_echo_server(ctx.backend) as port,
        mesh.open_websocket_peer(f"ws://127.0.0.1:{port}/ws", agent="echo") as peer,
    ):
        return await measure_peer(peer, ctx)


@scenario(
    "mesh-http",
    group="http",
    baseline=("httpx-uvicorn", "mcp-http"),
    description="mesh RPC over HTTP POST /rpc to the echo agent",
    smoke_modes=("sequential",),
)
async def mesh_http(ctx: RunContext) -> Measurement:
    import mesh

    quiet_logs()
    async with (
        open_echo_server(ctx.backend) as port,
        mesh.open_http_peer(f"http://127.0.0.1:{port}", agent="echo") as peer,
    ):
        return await measure_peer(peer, ctx)


@scenario(
    "mesh-broadcast",
    group="broadcast",
    baseline="ws-fanout",
    modes=("clients1000",),
    metric="p50_us",
    higher_is_better=False,
    description="mesh notification to 1,000 WebSocket peers: stamp to last receipt",
)
async def mesh_broadcast(ctx: RunContext) -> Measurement:
    from bench.mesh_crowd import measure_broadcast, open_mesh_crowd

    quiet_logs()
    clients = 50 if ctx.smoke else 1000
    async with open_mesh_crowd(ctx.backend) as crowd:
        await crowd.open(clients)
        result = await measure_broadcast(crowd, ctx)
    result.extra["clients"] = clients
    return result


@scenario(
    "mesh-idle",
    group="memory",
    baseline="ws-idle",
    modes=("conns1000", "conns10000"),
    metric="kib_per_conn",
    higher_is_better=False,
    description="agent server RSS per idle mesh WebSocket link",
    max_repeat=1,
    smoke_modes=("conns1000",),
    setup_allowance_s=IDLE_BUDGET_S + 150.0,
    thorough_modes=("conns10000",),  # minutes on a loaded machine: --thorough
)
async def mesh_idle(ctx: RunContext) -> Measurement:
    from bench._children import rss_kib
    from bench._cpu import OpeningMeter
    from bench.mesh_crowd import WARM_CONNECTIONS, open_mesh_crowd

    quiet_logs()
    wanted = int(ctx.mode.removeprefix("conns"))
    n, warm = (min(wanted, 100), 10) if ctx.smoke else (wanted, WARM_CONNECTIONS)
    async with open_mesh_crowd(ctx.backend) as crowd:
        _, crowd_before = await crowd.open(warm)
        before = rss_kib(crowd.server_pid)
        opening = OpeningMeter(crowd.server_pid, crowd.process.pid)
        asked, total, crowd_after = 0, warm, crowd_before
        # In steps, within a budget: past it, report what the server holds.
        with anyio.move_on_after(IDLE_BUDGET_S):
            while asked < n:
                step = min(IDLE_STEP, n - asked)
                total, crowd_after = await crowd.open(step)
                asked += step
        opened = opening.stop(total - warm)
        held, lost = await crowd.census()
        after = rss_kib(crowd.server_pid)
    if crowd.failed:  # refused links make every figure here a figure of fewer links
        raise RuntimeError(f"the server refused {crowd.failed:,} of {n + warm:,} links")
    added = max(1, held - warm)
    return Measurement(
        extra={
            "kib_per_conn": (after - before) / added,
            "connections": float(held - warm),
            "server_rss_before_kib": float(before),
            "server_rss_after_kib": float(after),
            "client_kib_per_conn": (crowd_after - crowd_before) / max(1, total - warm),
            **opened,
            "links_lost": float(lost),
            "links_failed": float(crowd.failed),
        },
        notes={"complete": str(asked >= n and held - warm >= n)},
    )


# -- the registry ------------------------------------------------------------------------


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    """`fn(*args)` and its duration, with a full collection first so that a cyclic-GC
    pass over 100,000 records does not land inside (and dominate) a small expiry tick."""
    gc.collect()
    started = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - started


@scenario(
    "registry",
    group="registry",
    modes=("agents100000",),
    backends=("asyncio",),
    metric="heartbeats_per_s",
    description="registry.Registry: heartbeats/s at 100,000 agents; expiry cost per change",
)
async def registry_table(ctx: RunContext) -> Measurement:
    """Heartbeats to random agents for the whole window, then expiry ticks of growing size."""
    from registry import AgentId, AgentRecord, Registry

    quiet_logs()
    n = 10_000 if ctx.smoke else int(ctx.mode.removeprefix("agents"))
    few, some = 10, n // 100  # agents with a 1 s interval; the rest beat every 10 s
    table = Registry()
    ids = [AgentId(f"agent-{i}") for i in range(n)]
    _, register_s = _timed(
        lambda: [
            table.register(
                AgentRecord(id=a, name=a, heartbeat_interval=1.0 if i < few + some else 10.0), 0.0
            )
            for i, a in enumerate(ids)
        ]
    )
    gc.collect()
    order = ids * 4
    random.Random(1).shuffle(order)
    beat = table.heartbeat
    # Heartbeats at 0.5 s: every agent stays ONLINE. Warm-up first, then the window.
    clock = 0.5
    beats = 0
    started = time.perf_counter()
    warm_end, end = started + ctx.warmup, started + ctx.warmup + ctx.duration
    window_started = None
    while (now := time.perf_counter()) < end:
        if window_started is None and now >= warm_end:
            window_started, beats = now, 0
        clock += 1e-6
        for agent_id in order:
            beat(agent_id, clock)
        beats += len(order)
    window = time.perf_counter() - (window_started or started)
    # Expiry. Deadlines in the heap: 1.0 (the 1 s agents) and 10.0; all last beat at ~0.5.
    table.expire(clock)  # nothing due; also binds structlog lazily
    _, idle_s = _timed(table.expire, clock)
    moved, moved_s = _timed(table.expire, 1.2)  # the 1 s agents beat since: re-scheduled to 1.5
    due, due_s = _timed(table.expire, 1.6)  # ... and now go STALE: few + some changes
    # Everyone at once: all beat at 20 (the 10 s agents' entries are re-scheduled at 20),
    # then at 30.5 every agent goes STALE (the 1 s ones OFFLINE too).
    for agent_id in ids:
        beat(agent_id, 20.0)
    table.expire(20.0)
    mass, mass_s = _timed(table.expire, 30.5)
    return Measurement(
        extra={
            "heartbeats_per_s": beats / window,
            "ns_per_heartbeat": window / beats * 1e9,
            "register_per_s": n / register_s,
            "expire_nothing_due_us": idle_s * 1e6,
            "expire_reschedule_us": moved_s * 1e6,
            "expire_changes_small": float(len(due)),
            "expire_small_us": due_s * 1e6,
            "expire_changes_mass": float(len(mass)),
            "expire_mass_ms": mass_s * 1e3,
            "expire_us_per_change_mass": mass_s * 1e6 / max(1, len(mass)),
            "expire_us_per_change_small": due_s * 1e6 / max(1, len(due)),
            "agents": float(n),
        },
        notes={"rescheduled_changes": str(len(moved))},
    )
