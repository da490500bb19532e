"""An in-memory frame stream pair: the test double every transport is measured against.

Each direction is a small channel of our own rather than anyio's memory object
streams: a frame handed to a waiting receiver costs one wake-up of the loop's own
kind (:mod:`transports._loop`) and a ``receive`` that finds a frame returns it
without a checkpoint. anyio's streams build an ``anyio.Event`` (a backend lookup)
per blocked receive and checkpoint before every one; on the in-process call path
(``bench/profile.py``) that was the largest single cost after the loop itself.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence

import anyio

from transports._base import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameTooLarge,
    TransportClosed,
    TransportInfo,
)
from transports._loop import Loop, Wakeup, current_loop

__all__ = ["MemoryFrameStream", "memory_stream_pair"]

_HEAD = 512


class _Broken(Exception):
    """The receiving end of a channel is closed: nothing sent will be read."""


class _Channel:
    """One direction: frames in order, at most ``capacity`` waiting unread.

    One task receives at a time; senders that find no room park in order. A
    frame is handed over when there is room or a receiver is parked waiting
    (so ``capacity`` 0 is a rendezvous, as with anyio's memory streams).
    """

    __slots__ = (
        "_capacity",
        "_frames",
        "_loop",
        "_receiver",
        "_senders",
        "deliver",
        "read_closed",
        "sent_all",
    )

    def __init__(self, capacity: float) -> None:
        self._capacity = capacity
        self._frames: deque[bytes] = deque()
        self._loop: Loop | None = None
        self._receiver: Wakeup | None = None  # a receiver parked on an empty channel
        self._senders: deque[Wakeup] = deque()  # senders parked for room
        self.read_closed = False  # the receiving end closed
        #: Offered a frame when the receiver is parked on an empty channel; True: it took it
        #: (see MemoryFrameStream.deliver_to).
        self.deliver: Callable[[bytes], bool] | None = None
        self.sent_all = False  # the sending end closed: the receiver ends after what is queued

    def _wakeup(self) -> Wakeup:
        if self._loop is None:
            self._loop = current_loop()
        return self._loop.wakeup()

    def put_nowait(self, frame: bytes) -> bool:
        """Hand ``frame`` over if there is room; False if not. Raises _Broken."""
        if self.read_closed:
            raise _Broken
        receiver = self._receiver
        if receiver is None and len(self._frames) >= self._capacity:
            return False
        # A parked receiver means nothing is queued: a frame taken here overtakes none.
        if receiver is not None and self.deliver is not None and self.deliver(frame):
            return True
        self._frames.append(frame)
        if receiver is not None:
            self._receiver = None
            receiver.set()
        return True

    async def put(self, frame: bytes) -> None:
        while not self.put_nowait(frame):
            if self.sent_all:
                raise _Broken
            parked = self._wakeup()
            self._senders.append(parked)
            try:
                await parked.wait()
            finally:
                if parked in self._senders:
                    self._senders.remove(parked)

    async def get(self) -> bytes | None:
        """The next frame; None once the sender closed and everything queued was read."""
        frames = self._frames
        while not frames:
            if self.sent_all or self.read_closed:
                return None
            if self._senders:  # a sender waiting for a receiver (capacity 0), or for room
                self._senders.popleft().set()
            parked = self._receiver = self._wakeup()
            try:
                await parked.wait()
            finally:
                if self._receiver is parked:
                    self._receiver = None
        frame = frames.popleft()
        if self._senders:
            self._senders.popleft().set()
        return frame

    def close_sending(self) -> None:
        self.sent_all = True
        self._wake_all()

    def close_receiving(self) -> None:
        self.read_closed = True
        self._frames.clear()
        self._wake_all()

    def _wake_all(self) -> None:
        if self._receiver is not None:
            self._receiver.set()
            self._receiver = None
        while self._senders:
            self._senders.popleft().set()


class MemoryFrameStream:
    """One end of an in-memory link. Enforces the same size limit a wire would."""

    def __init__(
        self, outbound: _Channel, inbound: _Channel, *, name: str, max_frame_size: int
    ) -> None:
        self._out = outbound
        self._in = inbound
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
                try:
                    await self._out.put(backlog[0])
                except _Broken:
                    backlog.clear()  # nothing will carry it now; send_nowait must raise too
                    raise self._peer_closed() from None
                backlog.popleft()

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Hand frames over without waiting; False if some wait for ``send_many`` (no room)."""
        self._check_open()
        backlog = self._backlog
        if backlog or self._draining.locked():
            backlog.extend(frames)
            return False
        put = self._out.put_nowait
        for n, frame in enumerate(frames):
            try:
                if not put(frame):
                    backlog.extend(frames[n:])
                    return False
            except _Broken:
                raise self._peer_closed() from None
        return True

    def deliver_to(self, take: Callable[[bytes], bool] | None) -> None:
        """Offer ``take`` each frame that arrives while the receiver waits on an empty link.

        ``take`` runs in the sender's task and returns True if it consumed the frame (which
        ``receive`` then never returns), False to leave it to ``receive``. A peer uses it to
        wake a lone caller straight from here rather than through its reader task.
        """
        limit = self._max

        def offer(frame: bytes) -> bool:
            return len(frame) <= limit and take is not None and take(frame)

        self._in.deliver = None if take is None else offer

    def _check_open(self) -> None:
        if self._closed_reason is not None:
            raise TransportClosed(self._closed_reason)

    def _peer_closed(self) -> TransportClosed:
        return TransportClosed(self._closed_reason or "peer closed the in-memory link")

    async def receive(self) -> bytes:
        self._check_open()
        frame = await self._in.get()
        if frame is None:
            if self._closed_reason is not None:
                raise TransportClosed(self._closed_reason)
            raise self._peer_closed()
        if len(frame) > self._max:
            raise FrameTooLarge(len(frame), self._max, frame[:_HEAD], frame[-_HEAD:])
        return frame

    async def aclose(self) -> None:
        if self._closed_reason is None:
            self._closed_reason = "closed locally"
        self._out.close_sending()
        self._in.close_receiving()


def memory_stream_pair(
    *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, buffer: float = math.inf
) -> tuple[MemoryFrameStream, MemoryFrameStream]:
    """Two connected ends. ``buffer`` frames may wait unread in each direction."""
    a_to_b, b_to_a = _Channel(buffer), _Channel(buffer)
    return (
        MemoryFrameStream(a_to_b, b_to_a, name="memory:a", max_frame_size=max_frame_size),
        MemoryFrameStream(b_to_a, a_to_b, name="memory:b", max_frame_size=max_frame_size),
    )
