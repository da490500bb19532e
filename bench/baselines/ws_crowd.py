"""Raw websockets with many clients: fan-out to 1,000, and memory per idle connection.

Three processes. The server (``python -m bench.baselines.ws_crowd server``)
holds every connection on ``/`` idle and answers a control connection on
``/control``: ``wait <n>`` (until n connections are held) and ``go <seq>`` (broadcast one
message stamped with ``time.monotonic()`` to all, with websockets'
`broadcast`). The crowd (``... ws_crowd clients <port>``) opens connections
when told ``open <n>`` on stdin and, for each broadcast, prints how long after
the stamp its last connection received it. CLOCK_MONOTONIC is one clock for
every process on a Linux machine, so the stamp and the receipt compare.
The measuring process (`bench.run_one`) drives both and reads /proc for RSS.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import msgspec

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
from bench._cpu import OpeningMeter
from bench._measure import GRACE_S, LineReader, summarize
from bench._registry import Measurement, RunContext, scenario

#: Concurrent handshakes while opening a crowd: the listen backlog must hold them.
OPEN_CONCURRENCY = 100
BACKLOG = 1024
#: Opening 10,000 connections takes ~10-20 s on 2 shared cores.
OPEN_TIMEOUT_S = 120.0


class Stamp(msgspec.Struct):
    seq: int
    t0: float


async def serve_crowd() -> None:
    from websockets.asyncio.server import ServerConnection, broadcast, serve

    raise_nofile_limit()
    recipients: set[ServerConnection] = set()
    joined = [anyio.Event()]  # set, and replaced, whenever a recipient joins
    encoder = msgspec.json.Encoder()

    async def control(ws: ServerConnection) -> None:
        async for command in ws:
            verb, _, arg = str(command).partition(" ")
            if verb == "wait":  # until at least <arg> recipients are held
                while len(recipients) < int(arg):
                    await joined[0].wait()
                await ws.send(str(len(recipients)))
            elif verb == "go":
                t0 = time.monotonic()
                broadcast(recipients, encoder.encode(Stamp(int(arg), t0)).decode())
                await ws.send(f"{(time.monotonic() - t0) * 1e6:.1f}")

    async def handle(ws: ServerConnection) -> None:
        if ws.request is not None and ws.request.path == "/control":
            await control(ws)
            return
        recipients.add(ws)
        joined[0].set()
        joined[0] = anyio.Event()
        try:
            await ws.wait_closed()
        finally:
            recipients.discard(ws)

    async with serve(handle, "127.0.0.1", 0, compression=None, backlog=BACKLOG) as server:
        announce_port(server.sockets[0].getsockname()[1])
        await server.serve_forever()


class _Crowd:
    """The client side, inside the crowd process."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.limiter = anyio.Semaphore(OPEN_CONCURRENCY)
        self.opened = 0
        self.target = 0
        self.all_open = anyio.Event()
        self.received: dict[int, int] = {}
        self.decoder = msgspec.json.Decoder(Stamp)

    async def hold(self) -> None:
        from websockets.asyncio.client import connect

        async with self.limiter:
            ws = await connect(
                self.uri, compression=None, proxy=None, ping_interval=None, open_timeout=60
            )
        self.opened += 1
        if self.opened == self.target:
            self.all_open.set()
        async for message in ws:
            self.on_message(message)

    def on_message(self, message: Any) -> None:
        now = time.monotonic()
        stamp = self.decoder.decode(message)
        count = self.received[stamp.seq] = self.received.get(stamp.seq, 0) + 1
        if count == self.opened:  # the last of ours to get it
            del self.received[stamp.seq]
            _say(f"DONE {stamp.seq} {(now - stamp.t0) * 1e6:.1f}")

    async def open(self, tg: anyio.abc.TaskGroup, n: int) -> None:
        self.target += n
        self.all_open = anyio.Event()
        if n == 0:
            self.all_open.set()
        for _ in range(n):
            tg.start_soon(self.hold)
        await self.all_open.wait()
        _say(f"OPEN {self.opened} {rss_kib(os.getpid())}")


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def run_crowd(port: int) -> None:
    raise_nofile_limit()
    crowd = _Crowd(f"ws://127.0.0.1:{port}/")
    async with anyio.create_task_group() as tg:
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            verb, _, arg = line.strip().partition(" ")
            if verb == "open":
                await crowd.open(tg, int(arg))
        tg.cancel_scope.cancel()


class CrowdHandle:
    """The measuring side: a crowd process and a control connection to the server."""

    def __init__(self, process: anyio.abc.Process, control: Any, server_pid: int) -> None:
        assert process.stdout is not None
        self.process = process
        self.lines = LineReader(process.stdout)
        self.control = control
        self.server_pid = server_pid

    async def open(self, n: int) -> tuple[int, int]:
        """Open `n` more connections; wait until the server holds them all.

        Returns (connections held, crowd process RSS in KiB)."""
        assert self.process.stdin is not None
        with anyio.fail_after(OPEN_TIMEOUT_S):
            await self.process.stdin.send(f"open {n}\n".encode())
            _, total, rss = (await self.lines.receive_line()).split()
            # The server's handler may start a tick after the client's handshake.
            await self.ask(f"wait {int(total)}")
        return int(total), int(rss)

    async def ask(self, command: str) -> str:
        await self.control.send(command)
        return str(await self.control.recv())

    async def broadcast(self, seq: int) -> tuple[float, float]:
        """Broadcast once; return (us until the last client had it, us inside broadcast())."""
        send_us = float(await self.ask(f"go {seq}"))
        _, done_seq, all_us = (await self.lines.receive_line()).split()
        if int(done_seq) != seq:
            raise RuntimeError(f"crowd reported broadcast {done_seq!r} while waiting for {seq}")
        return float(all_us), send_us


@contextlib.asynccontextmanager
async def open_crowd() -> AsyncIterator[CrowdHandle]:
    from websockets.asyncio.client import connect

    async with open_server(python_module(__name__, "server")) as server:
        command = python_module(__name__, "clients", str(server.port))
        process = await anyio.open_process(command, stderr=None)
        try:
            uri = f"ws://127.0.0.1:{server.port}/control"
            async with connect(uri, compression=None, proxy=None) as control:
                yield CrowdHandle(process, control, server.pid)
        finally:
            await stop_process(process)


async def measure_fanout(crowd: CrowdHandle, ctx: RunContext) -> Measurement:
    """Broadcast repeatedly for warm-up + duration; latency = stamp to last receipt."""
    start = time.perf_counter() + ctx.warmup
    end = start + ctx.duration
    samples: list[float] = []
    send_us: list[float] = []
    cpu_before: tuple[float, float] | None = None
    seq = 0
    with anyio.fail_after(ctx.warmup + ctx.duration + GRACE_S):  # a lost message hangs
        while (now := time.perf_counter()) < end:
            if cpu_before is None and now >= start:
                cpu_before = (cpu_seconds(crowd.server_pid), cpu_seconds(crowd.process.pid))
            seq += 1
            all_us, sent = await crowd.broadcast(seq)
            if now >= start:
                samples.append(all_us / 1e6)
                send_us.append(sent)
    result = summarize(samples, len(samples), ctx.duration)
    if cpu_before is not None and samples:
        # CPU time per broadcast in the window (clock-tick resolution: 10 ms in total).
        server_cpu = cpu_seconds(crowd.server_pid) - cpu_before[0]
        crowd_cpu = cpu_seconds(crowd.process.pid) - cpu_before[1]
        result.extra["server_cpu_us_per_broadcast"] = server_cpu * 1e6 / len(samples)
        result.extra["crowd_cpu_us_per_broadcast"] = crowd_cpu * 1e6 / len(samples)
    send_us.sort()
    result.extra["server_send_p50_us"] = send_us[len(send_us) // 2] if send_us else 0.0
    return result


#: Idle connections opened (and not counted) before the "before" RSS reading, so
#: one-time costs (first handshake code paths, allocator arenas) stay out of it.
WARM_CONNECTIONS = 100


@scenario(
    "ws-fanout",
    group="broadcast",
    modes=("clients1000",),
    backends=("asyncio",),
    metric="p50_us",
    higher_is_better=False,
    description="raw websockets broadcast(): stamp to last of 1,000 clients",
)
async def ws_fanout(ctx: RunContext) -> Measurement:
    clients = 50 if ctx.smoke else 1000
    async with open_crowd() as crowd:
        await crowd.open(clients)
        result = await measure_fanout(crowd, ctx)
    result.extra["clients"] = clients
    return result


@scenario(
    "ws-idle",
    group="memory",
    modes=("conns1000", "conns10000"),
    backends=("asyncio",),
    metric="kib_per_conn",
    higher_is_better=False,
    description="raw websockets server RSS per idle connection",
    max_repeat=1,  # RSS per connection barely moves between runs; 10,000 take ~30 s
    thorough_modes=("conns10000",),  # minutes on a loaded machine: --thorough
)
async def ws_idle(ctx: RunContext) -> Measurement:
    wanted = int(ctx.mode.removeprefix("conns"))
    n, warm = (min(wanted, 200), 20) if ctx.smoke else (wanted, WARM_CONNECTIONS)
    async with open_crowd() as crowd:
        _, crowd_before = await crowd.open(warm)
        before = rss_kib(crowd.server_pid)
        opening = OpeningMeter(crowd.server_pid, crowd.process.pid)
        total, crowd_after = await crowd.open(n)
        opened = opening.stop(n)
        after = rss_kib(crowd.server_pid)
    return Measurement(
        extra={
            "kib_per_conn": (after - before) / n,
            "connections": float(total - warm),
            "server_rss_before_kib": float(before),
            "server_rss_after_kib": float(after),
            "client_kib_per_conn": (crowd_after - crowd_before) / n,
            **opened,
        }
    )


def main() -> None:
    die_with_parent()
    role = sys.argv[1]
    if role == "server":
        anyio.run(serve_crowd)
    else:
        anyio.run(run_crowd, int(sys.argv[2]))


if __name__ == "__main__":
    main()
