"""Timing loops and the small client-side pieces every RPC-style scenario shares.

`measure_calls` drives any `async def call()` either one at a time or from 64
concurrent callers, discards a warm-up, and turns what it saw into a
`Measurement`. The rest is the plumbing a raw baseline needs to put 64 calls in
flight on one connection: the JSON payload, a table of pending calls keyed by
id, and one writer task that sends everything queued in one write (a lock per
send serialises callers).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

import anyio
import anyio.abc
import msgspec

from bench._cpu import CpuMeter
from bench._registry import Measurement, RunContext

__all__ = [
    "INFLIGHT",
    "BatchedSender",
    "LineReader",
    "Pending",
    "Reply",
    "decode_reply",
    "encode_request",
    "measure_calls",
    "measure_echo",
    "split_lines",
    "summarize",
]

#: Concurrent callers in "inflight64" mode.
INFLIGHT = 64
#: Beyond the planned window, how long a run may take before it is declared hung.
GRACE_S = 10.0
#: The untimed first call may wait for a child to finish importing (~2 s for mcp).
FIRST_CALL_TIMEOUT_S = 30.0

_PARAMS = {"text": "hello, agent mesh", "n": 42, "tags": ["a", "b"]}
_encoder = msgspec.json.Encoder()


class Reply(msgspec.Struct):
    """The part of an echoed message a client needs: its id."""

    id: int


_reply_decoder = msgspec.json.Decoder(Reply)


def encode_request(call_id: int) -> bytes:
    """One JSON-RPC-shaped request of ~100 bytes, the payload every baseline echoes."""
    return _encoder.encode({"id": call_id, "method": "echo", "params": _PARAMS})


def decode_reply(data: bytes | str) -> int:
    """The id of an echoed message (decoding it is part of the cost measured)."""
    return _reply_decoder.decode(data).id


def split_lines(buffer: bytearray, chunk: bytes) -> list[bytes]:
    """Append `chunk` to `buffer` and take out the complete lines, without newlines."""
    buffer += chunk
    end = buffer.rfind(b"\n")
    if end < 0:
        return []
    lines = bytes(buffer[:end]).split(b"\n")
    del buffer[: end + 1]
    return lines


class LineReader:
    """Whole lines from a byte stream (a child's stdout), one at a time."""

    def __init__(self, stream: anyio.abc.ByteReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._lines: deque[bytes] = deque()

    async def receive_line(self) -> bytes:
        """The next line without its newline; `anyio.EndOfStream` once the stream ends."""
        while not self._lines:
            self._lines.extend(split_lines(self._buffer, await self._stream.receive()))
        return self._lines.popleft()


class Pending:
    """Calls waiting for their reply, keyed by id."""

    def __init__(self) -> None:
        self._events: dict[int, anyio.Event] = {}
        self._ids = itertools.count()

    def open(self) -> tuple[int, anyio.Event]:
        call_id = next(self._ids)
        event = self._events[call_id] = anyio.Event()
        return call_id, event

    def resolve(self, call_id: int) -> None:
        event = self._events.pop(call_id, None)
        if event is not None:
            event.set()


class BatchedSender:
    """Queue byte frames from many tasks; `run` sends all that is queued in one write."""

    def __init__(self, stream: anyio.abc.ByteSendStream) -> None:
        self._stream = stream
        self._queue: list[bytes] = []
        self._wake = anyio.Event()

    def send_nowait(self, data: bytes) -> None:
        self._queue.append(data)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            # A fresh event before taking the queue: a frame queued during the
            # write below sets it, so nothing is left behind.
            self._wake = anyio.Event()
            data = b"".join(self._queue)
            self._queue.clear()
            await self._stream.send(data)


def summarize(samples: list[float], completed: int, window: float) -> Measurement:
    """Turn latency samples (seconds) and completions in `window` into figures."""
    result = Measurement(calls_per_s=completed / window, samples=len(samples))
    if samples:
        ordered = sorted(samples)
        last = len(ordered) - 1
        result.p50_us = ordered[round(0.50 * last)] * 1e6
        result.p99_us = ordered[round(0.99 * last)] * 1e6
    return result


async def measure_calls(call: Callable[[], Awaitable[Any]], ctx: RunContext) -> Measurement:
    """Run `call` per `ctx.mode` for warm-up plus duration; report calls/s and latency.

    One untimed call goes first, so that start-up (a child still importing, a
    lazy handshake) is not in the warm-up's place. Latency counts calls that
    started inside the window; the rate counts calls that completed inside it.
    ``cpu_us_per_call`` is the CPU time every process of the measurement (this
    one, its servers and agents) spent in the window, per call completed in it.
    """
    workers = {"sequential": 1, "inflight64": INFLIGHT}.get(ctx.mode)
    if workers is None:
        raise ValueError(f"measure_calls does not know mode {ctx.mode!r}")
    with anyio.fail_after(FIRST_CALL_TIMEOUT_S):
        await call()
    start = perf_counter() + ctx.warmup
    end = start + ctx.duration
    samples: list[float] = []
    completed = 0
    meter = CpuMeter()

    async def clock_window() -> None:
        await anyio.sleep(max(0.0, start - perf_counter()))
        meter.start()
        await anyio.sleep(max(0.0, end - perf_counter()))
        meter.stop()

    async def worker() -> None:
        nonlocal completed
        while True:
            t0 = perf_counter()
            await call()
            t1 = perf_counter()
            if t1 >= end:
                return
            if t1 >= start:
                completed += 1
                if t0 >= start:
                    samples.append(t1 - t0)

    with anyio.fail_after(ctx.warmup + ctx.duration + GRACE_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock_window)
            for _ in range(workers):
                tg.start_soon(worker)
    result = summarize(samples, completed, ctx.duration)
    if meter.seconds is not None and completed:
        result.extra["cpu_us_per_call"] = meter.seconds * 1e6 / completed
    return result


async def measure_echo(
    send: Callable[[bytes], Awaitable[Any]],
    receive: Callable[[], Awaitable[bytes | str]],
    ctx: RunContext,
) -> Measurement:
    """Echo calls over one connection: send then receive, or 64 callers and one reader.

    In flight, the reader wakes each caller by the id its reply carries.
    """
    if ctx.mode == "sequential":

        async def call_direct() -> None:
            await send(encode_request(0))
            decode_reply(await receive())

        return await measure_calls(call_direct, ctx)
    pending = Pending()

    async def read_replies() -> None:
        while True:
            pending.resolve(decode_reply(await receive()))

    async def call() -> None:
        call_id, done = pending.open()
        await send(encode_request(call_id))
        await done.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_replies)
        result = await measure_calls(call, ctx)
        tg.cancel_scope.cancel()
    return result
