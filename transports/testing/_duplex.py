"""The checks of a duplex frame stream: both ends send, receive and close alike."""

from __future__ import annotations

import math
from itertools import count
from typing import Final

import anyio
import anyio.abc

from transports._base import FrameStream, FrameTooLarge, TransportClosed, TransportInfo
from transports.testing._support import (
    MIN_FRAME_SIZE,
    Check,
    expect,
    expect_closed,
    expect_closed_now,
    make_frame,
    receive_into,
    receive_n,
    same,
    show,
    sizes,
)


async def frames_arrive_whole_and_in_order_both_ways(a: FrameStream, b: FrameStream) -> None:
    for end, stream in (("a", a), ("b", b)):
        info = stream.info
        expect(
            isinstance(stream, FrameStream) and isinstance(info, TransportInfo),
            f"{end} is not a FrameStream with a TransportInfo (info: {info!r})",
        )
        expect(info.kind and info.peer, f"{end}.info does not name kind and peer: {info!r}")
        expect(
            stream.max_frame_size >= MIN_FRAME_SIZE,
            f"{end}.max_frame_size is {stream.max_frame_size}; the checks need {MIN_FRAME_SIZE}",
        )
    to_b = [make_frame("a", n, size) for n, size in enumerate(sizes(b.max_frame_size))]
    to_a = [make_frame("b", n, size) for n, size in enumerate(sizes(a.max_frame_size))]
    got: dict[str, list[bytes]] = {}

    async def send_all(stream: FrameStream, frames: list[bytes]) -> None:
        for frame in frames:
            await stream.send(frame)

    async def receive_all(stream: FrameStream, n: int, key: str) -> None:
        got[key] = await receive_n(stream, n)

    async with anyio.create_task_group() as tg:
        tg.start_soon(receive_all, b, len(to_b), "b")
        tg.start_soon(receive_all, a, len(to_a), "a")
        tg.start_soon(send_all, a, to_b)
        tg.start_soon(send_all, b, to_a)
    same(got["b"], to_b, "a to b")
    same(got["a"], to_a, "b to a")


async def send_many_keeps_order(a: FrameStream, b: FrameStream) -> None:
    size = min(3000, b.max_frame_size)
    numbers = count()
    batches = [
        [make_frame("m", next(numbers), size) for _ in range(k)] for k in (1, 0, 5, 50, 200, 2)
    ]
    wanted = [frame for batch in batches for frame in batch]
    async with anyio.create_task_group() as tg:
        got: list[bytes] = []
        tg.start_soon(receive_into, b, len(wanted), got)
        for batch in batches:
            await a.send_many(batch)
    same(got, wanted, "send_many")


async def send_nowait_takes_every_frame(a: FrameStream, b: FrameStream) -> None:
    """The contract a caller that never waits relies on: all frames taken, False means flush."""
    size = min(2048, b.max_frame_size)
    numbers = count()
    sent: list[bytes] = []
    poke, pokes = anyio.create_memory_object_stream[None](math.inf)

    def burst(k: int) -> list[bytes]:
        return [make_frame("n", next(numbers), size) for _ in range(k)]

    def nowait(frames: list[bytes]) -> None:
        sent.extend(frames)
        done = a.send_nowait(frames)
        expect(isinstance(done, bool), f"send_nowait returned {done!r}, not a bool")
        if not done:
            poke.send_nowait(None)

    async def writer() -> None:  # as a peer's writer task: finish what send_nowait left
        async for _ in pokes:
            await a.send_many([])

    got: list[bytes] = []
    with poke, pokes:
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
            for _ in range(40):  # nobody reads yet: the transport must queue what it cannot write
                nowait(burst(10))
            nowait([])
            tg.start_soon(receive_into, b, 40 * 10 + 30 * 9, got)
            for _ in range(30):  # queued frames go ahead of everything sent after them
                nowait(burst(5))
                frame = burst(1)
                sent.extend(frame)
                await a.send(frame[0])
                frames = burst(3)
                sent.extend(frames)
                await a.send_many(frames)
            await a.send_many([])
            poke.close()  # the writer's last round
    same(got, sent, "send_nowait, send and send_many interleaved")


async def max_frame_size_is_enforced(a: FrameStream, b: FrameStream) -> None:
    limit = b.max_frame_size
    at_limit = make_frame("L", 0, limit)
    over = [make_frame("O", 1, limit + 1), make_frame("O", 2, 2 * limit)]
    after = make_frame("A", 3, 100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(a.send_many, [at_limit, *over, after])
        same([await b.receive()], [at_limit], f"a frame of exactly the {limit}-byte limit")
        for frame in over:
            try:
                got = await b.receive()
            except FrameTooLarge as exc:
                expect(
                    exc.limit == limit, f"FrameTooLarge names the limit {exc.limit}, not {limit}"
                )
                expect(exc.size > limit, f"FrameTooLarge says {exc.size} bytes for {len(frame)}")
                expect(frame.startswith(exc.head), "FrameTooLarge.head is not the frame's start")
            else:
                raise AssertionError(
                    f"a frame over the {limit}-byte limit arrived ({show(got)}): want FrameTooLarge"
                )
        same([await b.receive()], [after], "the frame after oversized ones")


async def empty_frames_are_kept_or_dropped(a: FrameStream, b: FrameStream) -> None:
    """Stdio drops them (a blank line is keep-alive noise); none may turn into anything else."""
    x, y = make_frame("E", 0, 60), make_frame("E", 1, 60)
    got: list[bytes] = []

    async def receive_until_y() -> None:
        while len(got) < 6 and (not got or got[-1] != y):
            got.append(await b.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(receive_until_y)
        await a.send(b"")
        await a.send_many([b"", x, b""])
        await a.send(y)
    same([frame for frame in got if frame], [x, y], "frames around empty ones")


async def concurrent_senders_keep_frames_whole(a: FrameStream, b: FrameStream) -> None:
    """Several tasks send at once; each one's frames arrive whole and in its order."""
    cap = min(8192, b.max_frame_size)
    senders, each = 4, 60
    own = {
        f"s{k}": [
            make_frame(f"s{k}", n, 50 + (n * 997 + k * 131) % (cap - 50)) for n in range(each)
        ]
        for k in range(senders)
    }

    async def sender(frames: list[bytes]) -> None:
        i = turn = 0
        while i < len(frames):
            if turn % 3 == 0:
                await a.send(frames[i])
                i += 1
            elif turn % 3 == 1:
                await a.send_many(frames[i : i + 4])
                i += 4
            else:
                if not a.send_nowait(frames[i : i + 3]):
                    await a.send_many([])
                i += 3
            turn += 1

    got: list[bytes] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(receive_into, b, senders * each, got)
        for frames in own.values():
            tg.start_soon(sender, frames)
    for tag, frames in own.items():
        same([f for f in got if f.startswith(f"{tag}#".encode())], frames, f"sender {tag}")


async def close_is_seen_by_both_ends(a: FrameStream, b: FrameStream) -> None:
    frames = [make_frame("c", n, 200) for n in range(5)]
    got: list[bytes] = []
    far_end: list[TransportClosed] = []

    async def drain_b() -> None:
        while True:
            try:
                got.append(await b.receive())
            except TransportClosed as closed:
                far_end.append(closed)
                return

    async def wait_in_receive(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        task_status.started()
        await expect_closed("a task waiting in a.receive() as a closed", a.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain_b)
        await tg.start(wait_in_receive)
        await a.send_many(frames)
        await a.aclose()
    same(got, frames, "frames sent before aclose")
    expect(far_end and far_end[0].reason, "the far end's TransportClosed gives no reason")
    await expect_closed("b.send after the far end closed", b.send(frames[0]))
    await expect_closed("a.send after aclose", a.send(frames[0]))
    await expect_closed("a.send_many after aclose", a.send_many(frames))
    expect_closed_now("a.send_nowait after aclose", lambda: a.send_nowait(frames))
    await expect_closed("a.receive after aclose", a.receive())
    await a.aclose()  # idempotent
    await b.aclose()
    await b.aclose()


BOTH_WAYS_AT_ONCE: Final[tuple[Check, ...]] = (frames_arrive_whole_and_in_order_both_ways,)
ONE_WAY: Final[tuple[Check, ...]] = (
    send_many_keeps_order,
    send_nowait_takes_every_frame,
    max_frame_size_is_enforced,
    empty_frames_are_kept_or_dropped,
    concurrent_senders_keep_frames_whole,
    close_is_seen_by_both_ends,
)
