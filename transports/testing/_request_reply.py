"""The checks of a request/reply stream (HTTP): a caller, and an answerer that only answers."""

from __future__ import annotations

from functools import partial
from typing import Final

import anyio
import anyio.abc

from transports._base import FrameRejected, FrameStream, FrameTooLarge, TransportClosed
from transports.testing._support import (
    MIN_FRAME_SIZE,
    Check,
    expect,
    expect_closed,
    expect_closed_now,
    make_frame,
    receive_n,
    same,
    show,
    sizes,
)


def answer_to(request: bytes) -> bytes:
    """The answerer's reply: as long as the request (so it fits), its first byte marked."""
    if request.startswith(b"size="):  # asks for an answer of that many bytes
        return make_frame("R", 0, int(request[5:].split(b"#", 1)[0]))
    return b"R" + request[1:]


async def answer(b: FrameStream, *, refused: list[FrameTooLarge] | None = None) -> None:
    """Answer every frame, in order; an oversized one is noted (if allowed) and not answered."""
    while True:
        try:
            request = await b.receive()
        except FrameTooLarge as exc:
            if refused is None:
                raise
            refused.append(exc)
            continue
        except TransportClosed:
            return
        await b.send(answer_to(request))


async def every_request_is_answered(a: FrameStream, b: FrameStream) -> None:
    for end, stream in (("caller", a), ("answerer", b)):
        expect(isinstance(stream, FrameStream), f"the {end} is not a FrameStream")
        expect(stream.max_frame_size >= MIN_FRAME_SIZE, f"the {end}'s max_frame_size is too small")
    limit = min(a.max_frame_size, b.max_frame_size)
    requests = [make_frame("q", n, size) for n, size in enumerate(sizes(limit)[:-150])]
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, b)
        third = len(requests) // 3
        for frame in requests[:third]:
            await a.send(frame)
        await a.send_many(requests[third : 2 * third])
        done = a.send_nowait(requests[2 * third :])
        expect(isinstance(done, bool), f"send_nowait returned {done!r}, not a bool")
        if not done:
            await a.send_many([])
        got = await receive_n(a, len(requests))
        tg.cancel_scope.cancel()
    same(sorted(got), sorted(answer_to(r) for r in requests), "answers (in any order)")


async def sizes_are_enforced_both_ways(a: FrameStream, b: FrameStream) -> None:
    limit_b, limit_a = b.max_frame_size, a.max_frame_size
    refused: list[FrameTooLarge] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(answer, b, refused=refused))
        at_limit = make_frame("q", 0, limit_b)
        await a.send(at_limit)
        same([await a.receive()], [answer_to(at_limit)], "the answer to a request at the limit")
        over = make_frame("q", 1, limit_b + 1)
        await a.send(over)
        await expect_refused(a, over, refused)
        await a.send(b"size=%d#2" % limit_a)
        expect(len(await a.receive()) == limit_a, f"an answer of {limit_a} bytes was not whole")
        await a.send(b"size=%d#3" % (limit_a + 1))
        try:
            got = await a.receive()
        except FrameTooLarge as exc:
            expect(exc.limit == limit_a and exc.size > limit_a, f"FrameTooLarge: {exc}")
        else:
            raise AssertionError(f"an answer over the limit arrived ({show(got)})")
        probe = make_frame("q", 4, 100)
        await a.send(probe)
        same([await a.receive()], [answer_to(probe)], "a round trip after oversized frames")
        tg.cancel_scope.cancel()


async def expect_refused(a: FrameStream, over: bytes, refused: list[FrameTooLarge]) -> None:
    """An oversized request: FrameTooLarge at the answerer or FrameRejected to the caller."""
    probe = make_frame("q", 99, 100)
    await a.send(probe)
    answered = rejected = False
    while not (answered and (rejected or refused)):
        try:
            got = await a.receive()
        except FrameRejected as exc:
            expect(over.startswith(exc.head), "FrameRejected.head is not the request's start")
            rejected = True
        else:
            same([got], [answer_to(probe)], "the answer after an oversized request")
            answered = True


async def concurrent_callers_all_get_answers(a: FrameStream, b: FrameStream) -> None:
    senders, each = 4, 30
    requests = [make_frame(f"q{k}", n, 40 + n * 13) for k in range(senders) for n in range(each)]

    async def sender(frames: list[bytes]) -> None:
        await a.send(frames[0])
        await a.send_many(frames[1:10])
        if not a.send_nowait(frames[10:]):
            await a.send_many([])

    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, b)
        for k in range(senders):
            tg.start_soon(sender, requests[k * each : (k + 1) * each])
        got = await receive_n(a, len(requests))
        tg.cancel_scope.cancel()
    same(sorted(got), sorted(answer_to(r) for r in requests), "answers to concurrent callers")


async def close_ends_the_callers_stream(a: FrameStream, b: FrameStream) -> None:
    frame = make_frame("q", 0, 100)
    async with anyio.create_task_group() as tg:
        tg.start_soon(answer, b)
        await a.send(frame)
        same([await a.receive()], [answer_to(frame)], "a round trip before closing")

        woken = anyio.Event()

        async def wait_in_receive(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            task_status.started()
            await expect_closed("a task waiting in a.receive() as a closed", a.receive())
            woken.set()

        await tg.start(wait_in_receive)
        await a.aclose()
        await woken.wait()
        await expect_closed("a.send after aclose", a.send(frame))
        await expect_closed("a.send_many after aclose", a.send_many([frame]))
        expect_closed_now("a.send_nowait after aclose", lambda: a.send_nowait([frame]))
        await expect_closed("a.receive after aclose", a.receive())
        await a.aclose()
        tg.cancel_scope.cancel()


REQUEST_REPLY: Final[tuple[Check, ...]] = (
    every_request_is_answered,
    sizes_are_enforced_both_ways,
    concurrent_callers_all_get_answers,
    close_ends_the_callers_stream,
)
