"""A lone call reads its own answer: the stream hands it over, the peer's reader never sees it.

Over the in-memory link, a sequential call's answer is taken by the calling peer as it
arrives (in the sender's task) and wakes the caller directly: two loop iterations a call,
not three (docs/performance.md). Calls that overlap keep the multiplexed path: every
answer passes through the reader.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from mesh import open_peer, serve_peer
from mesh.agents.echo import agent
from transports import FrameTooLarge, MemoryFrameStream, memory_stream_pair

pytestmark = pytest.mark.anyio

ARGUMENTS = {"message": "hello, agent mesh"}


def _count_answers(stream: MemoryFrameStream) -> list[bytes]:
    """Every answer (a frame without a method) the stream's ``receive`` returns."""
    seen: list[bytes] = []
    receive: Callable[[], Awaitable[bytes]] = stream.receive

    async def counting() -> bytes:
        frame = await receive()
        if b'"method"' not in frame:
            seen.append(frame)
        return frame

    stream.receive = counting  # type: ignore[method-assign]
    return seen


async def test_sequential_calls_are_answered_without_the_reader() -> None:
    client, server = memory_stream_pair()
    through_reader = _count_answers(client)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_peer, server, agent)
            async with open_peer(client, agent=agent.id) as peer:
                # the first may come before the reader task first waits: it queues
                assert await peer.call_tool("echo", ARGUMENTS) == ARGUMENTS
                through_reader.clear()
                for _ in range(5):
                    assert await peer.call_tool("echo", ARGUMENTS) == ARGUMENTS
            await server.aclose()
    assert through_reader == []


async def test_overlapping_calls_keep_the_reader() -> None:
    client, server = memory_stream_pair()
    through_reader = _count_answers(client)
    answers: list[object] = []
    calls = 8
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_peer, server, agent)
            async with open_peer(client, agent=agent.id) as peer:

                async def call(n: int) -> None:
                    answers.append(await peer.call_tool("echo", {"message": str(n)}))

                async with anyio.create_task_group() as callers:
                    for n in range(calls):
                        callers.start_soon(call, n)
            await server.aclose()
    assert sorted(answers, key=str) == sorted(({"message": str(n)} for n in range(calls)), key=str)
    # all but (at most) the last, which may find itself alone
    assert len(through_reader) >= calls - 1


async def test_the_stream_offers_a_frame_only_to_a_waiting_receiver() -> None:
    sender, receiver = memory_stream_pair(max_frame_size=64)
    taken: list[bytes] = []

    def take(frame: bytes) -> bool:
        if frame.startswith(b"keep"):
            return False
        taken.append(frame)
        return True

    receiver.deliver_to(take)
    got: list[bytes | str] = []

    async def read() -> None:
        try:
            got.append(await receiver.receive())
        except FrameTooLarge as exc:
            got.append(f"too large: {exc.size}")

    with anyio.fail_after(30):
        # nobody waits: queued in order, never offered
        assert sender.send_nowait([b"one", b"two"])
        assert [await receiver.receive(), await receiver.receive()] == [b"one", b"two"]
        for frame in (b"taken", b"keep", b"x" * 65):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await anyio.wait_all_tasks_blocked()
                assert sender.send_nowait([frame])
                if frame == b"taken":  # taken: the receiver still waits; end it
                    assert sender.send_nowait([b"keep after"])
    assert taken == [b"taken"]
    assert got == [b"keep after", b"keep", "too large: 65"]
