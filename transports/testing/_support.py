"""What every check shares: frames that name themselves, and expectations that say what broke."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from transports._base import FrameStream, TransportClosed

#: One check: it gets a fresh connected pair, ``a`` sending (or calling) first.
Check = Callable[[FrameStream, FrameStream], Awaitable[None]]

#: The smallest ``max_frame_size`` the checks can work with (their frames name themselves).
MIN_FRAME_SIZE: Final = 1024

_FILL: Final = bytes(range(0x21, 0x7F))  # printable ASCII: no newline, no space


def make_frame(tag: str, n: int, size: int) -> bytes:
    """Exactly ``size`` bytes naming sender and number: a cut, merged or misplaced frame shows."""
    head = f"{tag}#{n}:é✓:".encode()
    if size < len(head):
        return (f"{tag}#{n}".encode() + _FILL)[:size]
    start = n % len(_FILL)
    pad = size - len(head)
    return head + (_FILL * ((start + pad) // len(_FILL) + 1))[start : start + pad]


def show(frame: bytes) -> str:
    return f"{len(frame)} bytes {frame[:32]!r}{'...' if len(frame) > 32 else ''}"


def expect(ok: object, message: str) -> None:
    if not ok:
        raise AssertionError(message)


def same(got: Sequence[bytes], want: Sequence[bytes], what: str) -> None:
    if list(got) == list(want):
        return
    for n, (frame, wanted) in enumerate(zip(got, want, strict=False)):
        if frame != wanted:
            raise AssertionError(
                f"{what}: frame {n} of {len(want)} is {show(frame)}, expected {show(wanted)}"
            )
    raise AssertionError(f"{what}: {len(got)} frames arrived, expected {len(want)}")


async def receive_n(stream: FrameStream, n: int) -> list[bytes]:
    return [await stream.receive() for _ in range(n)]


async def expect_closed(what: str, action: Awaitable[object]) -> TransportClosed:
    try:
        await action
    except TransportClosed as closed:
        expect(closed.reason, f"{what} raised TransportClosed without a reason")
        return closed
    raise AssertionError(f"{what} did not raise TransportClosed")


def expect_closed_now(what: str, call: Callable[[], object]) -> None:
    try:
        call()
    except TransportClosed:
        return
    raise AssertionError(f"{what} did not raise TransportClosed")


def sizes(limit: int) -> list[int]:
    """Sizes around the usual read-buffer boundaries up to the limit, then many small ones."""
    edges = [1, 2, 100, 1000, 4095, 4096, 4097, 65535, 65536, 65537, 200_000, limit - 1, limit]
    return [size for size in edges if size <= limit] + [37 + n * 7 % 400 for n in range(200)]


async def receive_into(stream: FrameStream, n: int, into: list[bytes]) -> None:
    into.extend(await receive_n(stream, n))
