"""The stdio transport's pipes: how far reading runs ahead, and closing under a waiting reader.

On asyncio the loop reads a pipe for us once a read would block (no ``wait_readable``
per read); these pin what that must not change: a receiver that falls behind holds
back the writer instead of buffering without bound, and a local close wakes a task
waiting in ``receive``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import anyio
import pytest
import sniffio

from transports import TransportClosed
from transports._lines import _HIGH_WATER, _READ_SIZE, LineChannel

pytestmark = pytest.mark.anyio

FRAME = 50_000  # not a divisor of the 64 KiB reads: frames straddle them
FRAMES = 80  # 4 MB: far more than the pipe and the read-ahead hold together


@pytest.fixture
async def pipe() -> AsyncIterator[tuple[LineChannel, LineChannel]]:
    """A reading and a writing channel over one pipe (each end unused on the other)."""
    read_fd, write_fd = os.pipe()
    spare_read, spare_write = os.pipe()
    reader = LineChannel(read_fd, spare_write, max_frame_size=FRAME)
    writer = LineChannel(spare_read, write_fd, max_frame_size=FRAME)
    yield reader, writer
    for channel in (reader, writer):
        channel.close_read()
        channel.close_write()


def _frame(n: int) -> bytes:
    return bytes([97 + n % 26]) * FRAME


async def test_a_slow_receiver_holds_the_writer_back(pipe: tuple[LineChannel, LineChannel]) -> None:
    reader, writer = pipe
    sent: list[int] = []

    async def write_all() -> None:
        for n in range(FRAMES):
            await writer.send(_frame(n))
            sent.append(n)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write_all)
            assert await reader.receive() == _frame(0)  # the loop now reads for the receiver
            await anyio.wait_all_tasks_blocked()
            assert len(sent) < FRAMES, "the writer never waited: reading ran ahead without bound"
            if sniffio.current_async_library() == "asyncio":
                assert reader._watch is not None
                assert reader._watch._buffered <= _HIGH_WATER + _READ_SIZE
            for n in range(1, FRAMES):
                assert await reader.receive() == _frame(n)
    assert sent == list(range(FRAMES))


async def test_closing_wakes_a_waiting_receiver(pipe: tuple[LineChannel, LineChannel]) -> None:
    reader, writer = pipe
    await writer.send(b"first")
    assert await reader.receive() == b"first"

    async def wait_then_close() -> None:
        await anyio.wait_all_tasks_blocked()
        reader.close_read()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_then_close)
            with pytest.raises(TransportClosed, match="closed locally"):
                await reader.receive()


async def test_end_of_file_is_explained_once_the_frames_are_read(
    pipe: tuple[LineChannel, LineChannel],
) -> None:
    reader, writer = pipe
    await writer.send(b"last words")
    assert await reader.receive() == b"last words"  # from here on the loop reads for us
    await writer.send(b"after")
    writer.close_write()
    with anyio.fail_after(10):
        assert await reader.receive() == b"after"
        with pytest.raises(TransportClosed, match="peer closed the pipe"):
            await reader.receive()


async def test_a_frame_that_comes_after_the_receiver_waits_costs_one_read(
    pipe: tuple[LineChannel, LineChannel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Request and reply, one at a time: each frame arrives while its receiver waits, so
    reading first would fail every time. On trio the channel waits first, then reads once;
    on asyncio the loop reads once per readable event. Either way, one read a frame."""
    reader, writer = pipe
    reads = 0
    real_read = os.read

    def counted(fd: int, size: int) -> bytes:
        nonlocal reads
        if fd == reader._rfd:
            reads += 1
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", counted)

    async def send_later(count: int) -> None:
        for n in range(count):
            await anyio.wait_all_tasks_blocked()  # the receiver waits for this one
            await writer.send(b"frame %d" % n)

    frames = 50
    with anyio.fail_after(30):
        for count in (1, frames):  # the first sets which way the channel reads
            reads = 0
            async with anyio.create_task_group() as tg:
                tg.start_soon(send_later, count)
                for n in range(count):
                    assert await reader.receive() == b"frame %d" % n
    if sniffio.current_async_library() == "trio":
        assert reads == frames  # it was two a frame: one failed, then one after the wait
    else:
        assert reads <= frames  # the loop may find two frames at one readable event
