"""Newline-delimited frames over a pair of non-blocking pipe file descriptors.

Both ends of the stdio transport use this: the orchestrator on its child's pipes,
the agent on its own stdin/stdout. We read file descriptors directly, 64 KiB at a
time, instead of going through asyncio's subprocess streams, which read 256 KiB per
call and, with glibc's default thresholds, map and unmap that buffer on every read
(docs/performance.md). Once a read would block, asyncio's loop reads the pipe
for us from then on (a reader that stays registered); on trio each read from
then on waits with ``wait_readable`` first, so a reply that has not come yet costs
no failed read.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import anyio
import sniffio

from transports._base import FrameTooLarge, TransportClosed

__all__ = ["LineChannel"]

_READ_SIZE: Final = 64 * 1024
_HEAD: Final = 512  # bytes of each end of an oversized frame kept so its id can be salvaged
_NEWLINE: Final = b"\n"
#: asyncio stops reading a pipe this far ahead of its receiver, and resumes below _LOW_WATER.
_HIGH_WATER: Final = 4 * _READ_SIZE
_LOW_WATER: Final = _READ_SIZE


class LineChannel:
    """Frames separated by ``\\n`` over a read fd and a write fd (both made non-blocking).

    ``describe_eof`` is awaited when the read side ends; it returns the
    :class:`TransportClosed` that explains why, so a child's exit status and
    stderr can be reported instead of a bare "end of file".
    """

    def __init__(
        self,
        read_fd: int,
        write_fd: int,
        *,
        max_frame_size: int,
        describe_eof: Callable[[], Awaitable[TransportClosed]] | None = None,
    ) -> None:
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        self._rfd = read_fd
        self._wfd = write_fd
        self._max = max_frame_size
        self._describe_eof = describe_eof or _peer_closed
        self._ready: deque[bytes | FrameTooLarge] = deque()
        self._partial: list[bytes] = []
        self._partial_len = 0
        self._discarding: int | None = None  # bytes of an oversized frame skipped so far
        self._discard_head = b""
        self._discard_tail = b""
        self._out = bytearray()
        self._flushing = anyio.Lock(fast_acquire=True)
        self._closed: TransportClosed | None = None
        self._watch: _AsyncioReader | None = None
        #: trio's ``wait_readable``, once a read would have blocked on trio.
        self._wait_readable: Callable[[int], Awaitable[None]] | None = None
        self._closed_while_waiting: type[BaseException] = anyio.ClosedResourceError
        self._take: Callable[[bytes], bool] | None = None  # see deliver_to

    @property
    def max_frame_size(self) -> int:
        return self._max

    @property
    def closed(self) -> TransportClosed | None:
        return self._closed

    def mark_closed(self, reason: TransportClosed) -> None:
        if self._closed is None:
            self._closed = reason

    # -- receiving ---------------------------------------------------------------------

    def deliver_to(self, take: Callable[[bytes], bool] | None) -> None:
        """On asyncio, offer ``take`` a frame that arrives alone while the receiver waits.

        A read that is exactly one whole line, with nothing buffered before it, is offered
        from the loop's readable callback; ``take`` returns True if it consumed the frame
        (``receive`` never returns it), False to leave it to ``receive``. A peer uses it to
        wake a lone caller directly instead of through its reader task.
        """
        self._take = take

    def _offer(self, chunk: bytes) -> bool:
        take = self._take
        if take is None or self._ready or self._partial or self._discarding is not None:
            return False
        if chunk.find(_NEWLINE) != len(chunk) - 1 or len(chunk) - 1 > self._max:
            return False
        return len(chunk) > 1 and take(chunk[:-1])

    async def receive(self) -> bytes:
        ready = self._ready
        while True:
            while ready:
                item = ready.popleft()
                if type(item) is bytes:
                    if len(item) > self._max:
                        raise FrameTooLarge(len(item), self._max, item[:_HEAD], item[-_HEAD:])
                    if item:  # blank lines are keep-alive noise, not frames
                        return item
                else:
                    raise item  # type: ignore[misc]  # a FrameTooLarge queued in order
            if self._closed is not None:
                raise self._closed
            chunk = await self._read()
            if not chunk:
                if self._closed is None:
                    self.mark_closed(await self._describe_eof())
                continue
            self._absorb(chunk)

    async def _read(self) -> bytes:
        if self._watch is not None:
            return await self._watch.read()
        if self._wait_readable is not None:
            return await self._read_when_readable()
        try:
            return os.read(self._rfd, _READ_SIZE)
        except BlockingIOError:
            pass
        except OSError as exc:
            self.mark_closed(TransportClosed(f"pipe read failed: {exc}"))
            return b""
        if sniffio.current_async_library() == "asyncio":
            # From now on the loop reads for us (see _AsyncioReader).
            self._watch = _AsyncioReader(self._rfd, self.mark_closed, self._offer)
            return await self._watch.read()
        import trio

        self._wait_readable = trio.lowlevel.wait_readable
        self._closed_while_waiting = trio.ClosedResourceError
        return await self._read_when_readable()

    async def _read_when_readable(self) -> bytes:
        """trio: wait until the pipe is readable, then read it: one read per wake-up.

        Once a read would block, the next one after a frame was taken is likely to as
        well (a reply comes after the request): trying first costs a failed read and
        its exception per frame, where waiting first costs nothing more.
        """
        wait = self._wait_readable
        assert wait is not None
        while True:  # ends: data, the end of the pipe, or a close
            try:
                await wait(self._rfd)  # a checkpoint, as every receive must be
            except (anyio.ClosedResourceError, self._closed_while_waiting):
                self.mark_closed(TransportClosed("closed locally"))
                return b""
            try:
                return os.read(self._rfd, _READ_SIZE)
            except BlockingIOError:  # woken, and someone else read first
                continue
            except OSError as exc:
                self.mark_closed(TransportClosed(f"pipe read failed: {exc}"))
                return b""

    def _absorb(self, chunk: bytes) -> None:
        if self._discarding is not None:
            end = chunk.find(_NEWLINE)
            if end < 0:
                self._discarding += len(chunk)
                self._discard_tail = (self._discard_tail + chunk[-_HEAD:])[-_HEAD:]
                return
            size = self._discarding + end
            tail = (self._discard_tail + chunk[max(0, end - _HEAD) : end])[-_HEAD:]
            self._ready.append(FrameTooLarge(size, self._max, self._discard_head, tail))
            self._discarding = None
            chunk = chunk[end + 1 :]
        if _NEWLINE not in chunk:
            self._partial.append(chunk)
            self._partial_len += len(chunk)
            if self._partial_len > self._max:
                self._start_discarding()
            return
        if self._partial:
            self._partial.append(chunk)
            chunk = b"".join(self._partial)
            self._partial.clear()
            self._partial_len = 0
        lines = chunk.split(_NEWLINE)
        rest = lines.pop()
        self._ready.extend(lines)
        if rest:
            self._partial.append(rest)
            self._partial_len = len(rest)
            if self._partial_len > self._max:
                self._start_discarding()

    def _start_discarding(self) -> None:
        joined = b"".join(self._partial)
        self._discard_head = joined[:_HEAD]
        self._discard_tail = joined[-_HEAD:]
        self._discarding = len(joined)
        self._partial.clear()
        self._partial_len = 0

    # -- sending -------------------------------------------------------------------------
    #
    # One output buffer, written from its head by whoever gets there first: a
    # caller's send_nowait (no task switch at all when the pipe has room, the
    # common case) or the writer's flush (which waits while the pipe is full).
    # os.write is synchronous, so the two never interleave inside a frame.

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Queue frames and write what the pipe takes now; True if nothing is left over."""
        self._append(frames)
        if self._out:
            self._write_some()
        return not self._out

    async def send(self, frame: bytes) -> None:
        await self.send_many((frame,))

    async def send_many(self, frames: Sequence[bytes]) -> None:
        self._append(frames)
        await self.flush()

    async def flush(self) -> None:
        """Write everything queued, waiting while the pipe is full."""
        if self._out:
            self._write_some()
        if not self._out:
            return
        # One task waits on the pipe at a time (a second waiter on the same fd is
        # an error in anyio); the others find their frames written when it is done.
        async with self._flushing:
            while self._out:
                if self._wfd < 0:
                    raise TransportClosed("closed locally")
                try:
                    await anyio.wait_writable(self._wfd)
                except anyio.ClosedResourceError:
                    raise TransportClosed("closed locally") from None
                self._write_some()

    def _append(self, frames: Sequence[bytes]) -> None:
        if self._closed is not None:
            raise self._closed
        if self._wfd < 0:
            raise TransportClosed("closed locally")
        for frame in frames:
            if _NEWLINE in frame:
                raise ValueError("a frame must not contain a raw newline")
            self._out += frame
            self._out += _NEWLINE

    def _write_some(self) -> None:
        try:
            written = os.write(self._wfd, self._out)
        except BlockingIOError:
            return
        except (BrokenPipeError, ConnectionResetError):
            self._out.clear()
            raise self._closed or TransportClosed("peer closed the pipe") from None
        except OSError as exc:
            self._out.clear()
            raise TransportClosed(f"pipe write failed: {exc}") from None
        del self._out[:written]

    # -- closing -------------------------------------------------------------------------

    def close_write(self) -> None:
        """Close our writing end (the peer sees end of input)."""
        if self._wfd >= 0:
            anyio.notify_closing(self._wfd)
            os.close(self._wfd)
            self._wfd = -1

    def close_read(self) -> None:
        if self._rfd >= 0:
            if self._watch is not None:
                self._watch.close()
            else:
                anyio.notify_closing(self._rfd)
            os.close(self._rfd)
            self._rfd = -1


async def _peer_closed() -> TransportClosed:
    return TransportClosed("peer closed the pipe")


class _AsyncioReader:
    """On asyncio, the loop reads the pipe whenever it is readable and keeps the chunks.

    ``anyio.wait_readable`` on asyncio costs a checkpoint (an extra loop iteration),
    an ``asyncio.Event`` and an ``epoll_ctl`` pair on every read; a reader that
    stays registered, as asyncio's own pipe transport does, costs none of them. It
    stops reading past ``_HIGH_WATER`` unreceived bytes (the pipe then fills and
    holds the writer back) and starts again below ``_LOW_WATER``. trio keeps
    ``wait_readable``, which is what its own ``FdStream`` does.
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_closed",
        "_fd",
        "_loop",
        "_mark_closed",
        "_offer",
        "_reading",
        "_waiter",
    )

    def __init__(
        self,
        fd: int,
        mark_closed: Callable[[TransportClosed], None],
        offer: Callable[[bytes], bool],
    ) -> None:
        self._fd = fd
        self._mark_closed = mark_closed
        self._offer = offer  # a chunk taken here while the receiver waits is not queued
        self._loop = asyncio.get_running_loop()
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._reading = False
        self._resume()

    async def read(self) -> bytes:
        """The next chunk; ``b""`` at the end (or after a failure it reported)."""
        chunks = self._chunks
        while not chunks:
            if self._closed:
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk = chunks.popleft()
        self._buffered -= len(chunk)
        if not self._reading and not self._closed and self._buffered <= _LOW_WATER:
            self._resume()
        return chunk

    def close(self) -> None:
        """Before the fd is closed: stop reading, and wake a receiver to find it closed."""
        if not self._closed:
            self._mark_closed(TransportClosed("closed locally"))
            self._stop(closed=True)

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self._fd, _READ_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            self._mark_closed(TransportClosed(f"pipe read failed: {exc}"))
            self._stop(closed=True)
            return
        if not chunk:  # end of file: the receiver asks describe_eof why
            self._stop(closed=True)
            return
        if self._waiter is not None and not self._chunks and self._offer(chunk):
            return
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        if self._buffered > _HIGH_WATER:
            self._stop(closed=False)
        self._wake()

    def _resume(self) -> None:
        self._loop.add_reader(self._fd, self._on_readable)
        self._reading = True

    def _stop(self, *, closed: bool) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False
        self._closed = self._closed or closed
        if closed:
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
