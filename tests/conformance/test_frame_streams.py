"""``transports.testing`` run on every transport, and shown able to fail.

The RPC conformance suite (test_conformance.py) checks what a caller sees through
a Peer; this one checks the frame-stream contract underneath it, on the same
transports: memory, stdio, WebSocket (each end sending and closing in turn) and
HTTP (client and server, request/reply).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import pytest

from tests.conformance._pairs import DUPLEX_PAIRS, LIMIT, REQUEST_REPLY_PAIRS
from transports import (
    FrameStream,
    FrameTooLarge,
    MemoryFrameStream,
    TransportClosed,
    TransportInfo,
    memory_stream_pair,
)
from transports.testing import PairFactory, check_frame_stream, check_request_reply_stream

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("transport", sorted(DUPLEX_PAIRS))
async def test_every_duplex_transport_keeps_the_frame_stream_contract(transport: str) -> None:
    await check_frame_stream(DUPLEX_PAIRS[transport])


@pytest.mark.parametrize("transport", sorted(REQUEST_REPLY_PAIRS))
async def test_http_keeps_the_request_reply_part_of_the_contract(transport: str) -> None:
    await check_request_reply_stream(REQUEST_REPLY_PAIRS[transport])


async def test_a_duplex_transport_keeps_the_request_reply_part_too() -> None:
    await check_request_reply_stream(DUPLEX_PAIRS["memory"])


@pytest.mark.parametrize("transport", sorted(DUPLEX_PAIRS))
async def test_a_frame_over_the_limit_keeps_both_its_ends(transport: str) -> None:
    """A JSON-RPC answer may name its id last (the TypeScript SDK does): the receiver
    needs the frame's tail as well as its head to fail the right call."""
    frame = b'{"result":{"text":"' + b"x" * (LIMIT + 5000) + b'"},"jsonrpc":"2.0","id":7}'
    async with DUPLEX_PAIRS[transport]() as (a, b), anyio.create_task_group() as tg:
        tg.start_soon(a.send_many, [frame, b'{"ok":1}'])  # a clogged pair waits for us
        with anyio.fail_after(30), pytest.raises(FrameTooLarge) as refused:
            await b.receive()
        assert refused.value.size == len(frame) and refused.value.limit == LIMIT
        assert frame.startswith(refused.value.head) and len(refused.value.head) >= 64
        assert refused.value.tail == frame[-len(refused.value.tail) :]
        assert refused.value.tail.endswith(b'"id":7}') and len(refused.value.tail) >= 64
        with anyio.fail_after(30):
            assert await b.receive() == b'{"ok":1}'  # the stream carries on


# -- a check that cannot fail is a bug: each broken stream below fails the check it breaks ---


class _Wrapped:
    """A memory stream, to be broken in one way by a subclass."""

    def __init__(self, inner: MemoryFrameStream) -> None:
        self.inner = inner
        self.spare: list[MemoryFrameStream] = []  # closed with the pair

    @property
    def info(self) -> TransportInfo:
        return self.inner.info

    @property
    def max_frame_size(self) -> int:
        return self.inner.max_frame_size

    async def send(self, frame: bytes) -> None:
        await self.inner.send(frame)

    async def send_many(self, frames: Sequence[bytes]) -> None:
        await self.inner.send_many(frames)

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        return self.inner.send_nowait(frames)

    async def receive(self) -> bytes:
        return await self.inner.receive()

    async def aclose(self) -> None:
        await self.inner.aclose()


class _DropsWhatItCannotWrite(_Wrapped):
    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        for n, frame in enumerate(frames):
            if not self.inner.send_nowait([frame]):
                return n == len(frames) - 1  # the classic bug: the rest is simply lost
        return True


class _ReversesBatches(_Wrapped):
    async def send_many(self, frames: Sequence[bytes]) -> None:
        await self.inner.send_many(frames[::-1])


class _OverstatesItsLimit(_Wrapped):
    @property
    def max_frame_size(self) -> int:
        return self.inner.max_frame_size // 2


class _ClosesQuietly(_Wrapped):
    """Refuses to send after aclose but never tells the far end (nor a waiting receiver)."""

    closed = False

    async def send(self, frame: bytes) -> None:
        if self.closed:
            raise TransportClosed("closed")
        await self.inner.send(frame)

    async def aclose(self) -> None:
        self.closed = True


class _SendsAfterClose(_Wrapped):
    async def aclose(self) -> None:
        await self.inner.aclose()
        self.inner, hole = memory_stream_pair(max_frame_size=LIMIT)  # frames now vanish
        self.spare.extend((self.inner, hole))


def _broken(kind: type[_Wrapped], *, buffer: float = math.inf) -> PairFactory:
    @asynccontextmanager
    async def open_pair() -> AsyncIterator[tuple[FrameStream, FrameStream]]:
        a, b = memory_stream_pair(max_frame_size=LIMIT, buffer=buffer)
        ends = kind(a), kind(b)
        try:
            yield ends
        finally:
            for stream in (a, b, *ends[0].spare, *ends[1].spare):
                await stream.aclose()

    return open_pair


@pytest.mark.parametrize(
    ("kind", "buffer", "failure"),
    [
        (_DropsWhatItCannotWrite, 0, "send_nowait_takes_every_frame"),
        (_ReversesBatches, math.inf, "send_many_keeps_order"),
        (_OverstatesItsLimit, math.inf, "max_frame_size_is_enforced .*want FrameTooLarge"),
        (_ClosesQuietly, math.inf, "close_is_seen_by_both_ends .*not done within 2 s"),
    ],
)
async def test_each_broken_promise_fails_its_check(
    kind: type[_Wrapped], buffer: float, failure: str
) -> None:
    with pytest.raises(AssertionError, match=f"check_frame_stream: {failure}"):
        await check_frame_stream(_broken(kind, buffer=buffer), timeout=2)


async def test_a_caller_that_sends_after_close_fails_the_request_reply_check() -> None:
    with pytest.raises(AssertionError, match=r"a\.send after aclose did not raise"):
        await check_request_reply_stream(_broken(_SendsAfterClose), timeout=2)
