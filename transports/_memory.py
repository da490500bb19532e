"""An in-memory frame stream pair: the test double every transport is measured against."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from transports._base import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameTooLarge,
    TransportClosed,
    TransportInfo,
)

__all__ = ["MemoryFrameStream", "memory_stream_pair"]


class MemoryFrameStream:
    """One end of an in-memory link. Enforces the same size limit a wire would."""

    def __init__(
        self,
        send: MemoryObjectSendStream[bytes],
        receive: MemoryObjectReceiveStream[bytes],
        *,
        name: str,
        max_frame_size: int,
    ) -> None:
        self._send = send
        self._receive = receive
        self._info = TransportInfo("memory", name)
        self._max = max_frame_size
        self._closed_reason: str | None = None
        #: Frames taken by send_nowait (or a send_many in progress) not yet handed over.
        self._backlog: deque[bytes] = deque()
        self._draining = anyio.Lock(fast_acquire=True)

    @property
    def info(self) -> TransportInfo:
        return self._info

    @property
    def max_frame_size(self) -> int:
        return self._max

    async def send(self, frame: bytes) -> None:
        await self.send_many((frame,))

    async def send_many(self, frames: Sequence[bytes]) -> None:
        self._check_open()
        backlog = self._backlog
        backlog.extend(frames)
        # One task drains the backlog at a time, so no frame is sent twice or
        # overtakes another; what others add meanwhile rides along.
        async with self._draining:
            while backlog:
                await self._put(backlog[0])
                backlog.popleft()

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Hand frames over without waiting; False if some wait for ``send_many`` (buffer full)."""
        self._check_open()
        backlog = self._backlog
        if backlog or self._draining.locked():
            backlog.extend(frames)
            return False
        for n, frame in enumerate(frames):
            try:
                self._send.send_nowait(frame)
            except anyio.WouldBlock:
                backlog.extend(frames[n:])
                return False
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                raise self._peer_closed() from None
        return True

    def _check_open(self) -> None:
        if self._closed_reason is not None:
            raise TransportClosed(self._closed_reason)

    async def _put(self, frame: bytes) -> None:
        try:
            await self._send.send(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._backlog.clear()  # nothing will carry it now; send_nowait must raise too
            raise self._peer_closed() from None

    def _peer_closed(self) -> TransportClosed:
        return TransportClosed(self._closed_reason or "peer closed the in-memory link")

    async def receive(self) -> bytes:
        self._check_open()
        try:
            frame = await self._receive.receive()
        except anyio.EndOfStream:
            raise self._peer_closed() from None
        except anyio.ClosedResourceError:
            raise TransportClosed(self._closed_reason or "closed") from None
        if len(frame) > self._max:
            raise FrameTooLarge(len(frame), self._max, frame[:512])
        return frame

    async def aclose(self) -> None:
        if self._closed_reason is None:
            self._closed_reason = "closed locally"
        await self._send.aclose()
        await self._receive.aclose()


def memory_stream_pair(
    *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, buffer: float = math.inf
) -> tuple[MemoryFrameStream, MemoryFrameStream]:
    """Two connected ends. ``buffer`` frames may wait unread in each direction."""
    a_send, b_receive = anyio.create_memory_object_stream[bytes](buffer)
    b_send, a_receive = anyio.create_memory_object_stream[bytes](buffer)
    return (
        MemoryFrameStream(a_send, a_receive, name="memory:a", max_frame_size=max_frame_size),
        MemoryFrameStream(b_send, b_receive, name="memory:b", max_frame_size=max_frame_size),
    )
