"""Many mesh WebSocket peers on one agent server: broadcast to 1,000, memory per idle link.

The mesh's counterpart of `bench.baselines.ws_crowd`, built from what the mesh
has today (no daemon yet): the server (``python -m bench.mesh_crowd server
BACKEND``) is ``open_agent_server`` with a small `mesh.Agent`:

* every WebSocket link a recipient from the moment it is served (``on_link``), as
  raw websockets' server holds each connection from its handler's start: a link is
  up, and known, with no frame beyond its handshake's ``agent/info``;
* ``bench/control`` (a notification): the link it came on is the measuring side's,
  not a recipient;
* ``bench/wait {n}``: answer once ``n`` recipients are held;
* ``bench/broadcast {seq}``: ``Peer.broadcast_nowait(recipients, "bench/stamp", {seq, t0})`` to
  every recipient, ``t0`` being ``time.monotonic()`` before the first.

The crowd (``python -m bench.mesh_crowd clients PORT BACKEND``) opens
``mesh.open_websocket_peer`` peers when told ``open <n>`` on stdin; for each stamp it
prints how long after ``t0`` its last peer's notification handler ran (CLOCK_MONOTONIC
is one clock for every process). The measuring process drives both through a
control peer and reads /proc.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from bench._children import (
    announce_port,
    cpu_seconds,
    die_with_parent,
    open_server,
    python_module,
    raise_nofile_limit,
    rss_kib,
    stop_process,
)
from bench._measure import GRACE_S, LineReader, summarize
from bench._registry import Measurement, RunContext

if TYPE_CHECKING:
    from mesh import Peer, RequestContext

#: Concurrent handshakes while opening a crowd (the listen backlog holds them).
OPEN_CONCURRENCY = 100
#: Opening 10,000 mesh links (handshake with agent/info) on 2 shared cores:
#: ~20 s at best, minutes when the server's cyclic GC keeps re-scanning the links.
OPEN_TIMEOUT_S = 300.0
#: One link's handshake with its agent/info.
LINK_TIMEOUT_S = 60.0
#: Counting the links held, on a server that may be saturated.
CENSUS_TIMEOUT_S = 60.0
#: Idle links opened before the "before" RSS reading (see ws_crowd.WARM_CONNECTIONS).
WARM_CONNECTIONS = 100
#: The crowd server's connection limit: room for the 10,000-link run and its warm-up.
MAX_LINKS = 20_000
STAMP = "bench/stamp"


def _quiet_logs() -> None:
    from mesh._logging import configure_logging

    configure_logging(level="warning", stream=sys.stderr, json=True)


# -- the server ----------------------------------------------------------------------------


async def serve_crowd() -> None:
    import mesh
    from mesh._sdk.gc_tuning import tune_for_serving
    from transports import HttpServerConfig

    raise_nofile_limit()
    tune_for_serving()  # as `mesh serve` and `run_agent` do
    agent = mesh.Agent("crowd", description="bench: holds idle peers and broadcasts to them")
    recipients: dict[Peer, None] = {}  # insertion-ordered set
    joined = [anyio.Event()]  # set, and replaced, whenever a recipient joins

    def join(peer: Peer) -> None:
        recipients[peer] = None
        joined[0].set()
        joined[0] = anyio.Event()

    @agent.on_notification("bench/control")
    def control(peer: Peer | None, params: Any) -> None:
        assert peer is not None
        recipients.pop(peer, None)

    @agent.method("bench/wait")
    async def wait(ctx: RequestContext, params: Any) -> dict[str, int]:
        while len(recipients) < int(params["n"]):
            await joined[0].wait()
        lost = sum(1 for peer in recipients if peer.closed)
        return {"held": len(recipients) - lost, "lost": lost}

    @agent.method("bench/broadcast")
    async def broadcast(ctx: RequestContext, params: Any) -> dict[str, float]:
        t0 = time.monotonic()
        stamp = {"seq": int(params["seq"]), "t0": t0}
        # Encoded once; each link writes it straight to its socket where it has room.
        mesh.Peer.broadcast_nowait(recipients, STAMP, stamp)
        for peer in [peer for peer in recipients if peer.closed]:
            del recipients[peer]
        return {"queue_us": (time.monotonic() - t0) * 1e6}

    # A server meant to hold 10,000 links says so: the default admits 1,000 connections.
    frames = mesh.SessionConfig().max_frame_size
    http_config = HttpServerConfig(max_connections=MAX_LINKS, max_body_size=frames)
    async with mesh.open_agent_server(
        agent, host="127.0.0.1", port=0, http_config=http_config, on_link=join
    ) as server:
        announce_port(server.port)
        await anyio.sleep_forever()


# -- the crowd -------------------------------------------------------------------------------


class _Crowd:
    """The client side, inside the crowd process; also every peer's request handler."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.limiter = anyio.Semaphore(OPEN_CONCURRENCY)
        self.opened = 0
        self.target = 0
        self.all_open = anyio.Event()
        self.received: dict[int, int] = {}
        self.failed = 0  # links that could not open
        self.dropped = 0  # links that closed after opening
        self.first_error: str | None = None

    # RequestHandler: the crowd's peers serve no methods, and count stamps.
    async def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        from mesh import MethodNotFound

        raise MethodNotFound(f"the crowd serves no methods ({method!r})")

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        now = time.monotonic()
        if method != STAMP:
            return
        seq = params["seq"]
        count = self.received[seq] = self.received.get(seq, 0) + 1
        if count == self.opened - self.dropped:  # the last of ours to get it
            del self.received[seq]
            _say(f"DONE {seq} {(now - params['t0']) * 1e6:.1f}")

    async def hold(self) -> None:
        import mesh

        opened = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                async with self.limiter:
                    peer = await stack.enter_async_context(
                        mesh.open_websocket_peer(
                            self.url, agent="crowd", handler=self, connect_timeout=LINK_TIMEOUT_S
                        )
                    )
                self.opened += 1
                opened = True
                self._check_done()
                await peer.wait_closed()
        except Exception as exc:  # a link that fails is counted, not fatal
            if self.first_error is None:
                self.first_error = f"{type(exc).__name__}: {exc}"
            if not opened:
                self.failed += 1
                self._check_done()
        if opened:  # and now closed
            self.dropped += 1

    def _check_done(self) -> None:
        if self.opened + self.failed >= self.target:
            self.all_open.set()

    async def open(self, tg: anyio.abc.TaskGroup, n: int) -> None:
        self.target = self.opened + self.failed + n
        self.all_open = anyio.Event()
        if n == 0:
            self.all_open.set()
        for _ in range(n):
            tg.start_soon(self.hold)
        await self.all_open.wait()
        _say(f"OPEN {self.opened} {rss_kib(os.getpid())} {self.failed}")
        if self.first_error:
            print(
                f"crowd: {self.failed} links failed to open, {self.dropped} dropped;"
                f" first error: {self.first_error}",
                file=sys.stderr,
            )


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def run_crowd(port: int) -> None:
    raise_nofile_limit()
    # The crowd is the harness, not the system measured: without this, CPython's
    # cyclic GC re-scans every held link ever more often (past 5,000 links most
    # of the crowd's CPU) and the crowd, not the server, would set the pace.
    gc.disable()
    crowd = _Crowd(f"ws://127.0.0.1:{port}/ws")
    async with anyio.create_task_group() as tg:
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            verb, _, arg = line.strip().partition(" ")
            if verb == "open":
                await crowd.open(tg, int(arg))
        tg.cancel_scope.cancel()


# -- the measuring side ----------------------------------------------------------------------


class MeshCrowdHandle:
    """A crowd process and a control peer to the server."""

    def __init__(self, process: anyio.abc.Process, control: Peer, server_pid: int) -> None:
        assert process.stdout is not None
        self.process = process
        self.lines = LineReader(process.stdout)
        self.control = control
        self.server_pid = server_pid
        #: Links the server had already lost when last asked (e.g. keepalive timeouts).
        self.lost = 0
        #: Links the crowd failed to open.
        self.failed = 0

    async def open(self, n: int) -> tuple[int, int]:
        """Open `n` more links; wait until the server holds them all.

        Returns (links held, crowd process RSS in KiB)."""
        assert self.process.stdin is not None
        with anyio.fail_after(OPEN_TIMEOUT_S):
            await self.process.stdin.send(f"open {n}\n".encode())
            _, total, rss, failed = (await self.lines.receive_line()).split()
            self.failed = int(failed)
            held = await self.control.call("bench/wait", {"n": int(total)}, timeout=OPEN_TIMEOUT_S)
        self.lost = held["lost"]
        return int(total), int(rss)

    async def census(self) -> tuple[int, int]:
        """(links the server holds open, links it has seen close)."""
        held = await self.control.call("bench/wait", {"n": 0}, timeout=CENSUS_TIMEOUT_S)
        return int(held["held"]), int(held["lost"])

    async def broadcast(self, seq: int) -> tuple[float, float]:
        """Broadcast once; return (us until the last peer had it, us the server spent queueing)."""
        reply = await self.control.call("bench/broadcast", {"seq": seq})
        _, done_seq, all_us = (await self.lines.receive_line()).split()
        if int(done_seq) != seq:
            raise RuntimeError(f"crowd reported broadcast {done_seq!r} while waiting for {seq}")
        return float(all_us), float(reply["queue_us"])


@contextlib.asynccontextmanager
async def open_mesh_crowd(backend: str) -> AsyncIterator[MeshCrowdHandle]:
    import mesh

    async with open_server(python_module(__name__, "server", backend)) as server:
        command = python_module(__name__, "clients", str(server.port), backend)
        process = await anyio.open_process(command, stderr=None)
        try:
            url = f"ws://127.0.0.1:{server.port}/ws"
            async with mesh.open_websocket_peer(url, agent="crowd-server") as control:
                control.notify_nowait("bench/control")
                yield MeshCrowdHandle(process, control, server.pid)
        finally:
            await stop_process(process)


async def measure_broadcast(crowd: MeshCrowdHandle, ctx: RunContext) -> Measurement:
    """Broadcast repeatedly for warm-up + duration; latency = stamp to last receipt.

    Also: the CPU time the server and the crowd spent per broadcast in the window.
    """
    start = time.perf_counter() + ctx.warmup
    end = start + ctx.duration
    samples: list[float] = []
    queue_us: list[float] = []
    cpu_before: tuple[float, float] | None = None
    seq = 0
    with anyio.fail_after(ctx.warmup + ctx.duration + GRACE_S):  # a lost message hangs
        while (now := time.perf_counter()) < end:
            if cpu_before is None and now >= start:
                cpu_before = (cpu_seconds(crowd.server_pid), cpu_seconds(crowd.process.pid))
            seq += 1
            all_us, queued = await crowd.broadcast(seq)
            if now >= start:
                samples.append(all_us / 1e6)
                queue_us.append(queued)
    result = summarize(samples, len(samples), ctx.duration)
    if cpu_before is not None and samples:
        server_cpu = cpu_seconds(crowd.server_pid) - cpu_before[0]
        crowd_cpu = cpu_seconds(crowd.process.pid) - cpu_before[1]
        result.extra["server_cpu_us_per_broadcast"] = server_cpu * 1e6 / len(samples)
        result.extra["crowd_cpu_us_per_broadcast"] = crowd_cpu * 1e6 / len(samples)
    queue_us.sort()
    result.extra["server_queue_p50_us"] = queue_us[len(queue_us) // 2] if queue_us else 0.0
    return result


def main() -> None:
    die_with_parent()
    _quiet_logs()
    role, *args = sys.argv[1:]
    if role == "server":
        anyio.run(serve_crowd, backend=args[0])
    else:
        anyio.run(run_crowd, int(args[0]), backend=args[1])


if __name__ == "__main__":
    main()
