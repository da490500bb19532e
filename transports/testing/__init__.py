"""Conformance checks for frame streams: this package's transports and anyone else's.

:func:`check_frame_stream` is to :class:`~transports.FrameStream` what trio's
``check_two_way_stream`` is to trio's streams: hand it a factory of connected
pairs, and it opens a fresh pair for each check and tests, with each end in turn
as the sender, the promises the interface documents — frames arrive whole and in
order both ways at once, ``send_many`` and ``send_nowait`` keep their contract,
``max_frame_size`` is enforced with :class:`~transports.FrameTooLarge`, empty
frames do no harm, several tasks may send at once, and ``aclose`` ends the stream
with :class:`~transports.TransportClosed` at both ends. A request/reply transport
such as HTTP keeps only part of that; :func:`check_request_reply_stream` checks
that part.

It needs nothing but anyio (no test runner): a broken promise raises
``AssertionError`` naming the check and the direction, and every check has a
deadline. The frames it sends are UTF-8 text without newlines, as every mesh
message is (stdio frames by line; WebSocket sends text frames), and go up to
twice ``max_frame_size``, which must be at least :data:`MIN_FRAME_SIZE`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Final

import anyio

from transports._base import FrameStream
from transports._groups import unwrap_single_error
from transports.testing._duplex import BOTH_WAYS_AT_ONCE, ONE_WAY
from transports.testing._request_reply import REQUEST_REPLY
from transports.testing._support import MIN_FRAME_SIZE, Check

__all__ = [
    "CHECK_TIMEOUT",
    "MIN_FRAME_SIZE",
    "PairFactory",
    "check_frame_stream",
    "check_request_reply_stream",
]

#: Opens two connected streams; they live as long as the ``async with``.
PairFactory = Callable[[], AbstractAsyncContextManager[tuple[FrameStream, FrameStream]]]

#: Each check, its pair's opening and closing included, must be done within this:
#: seconds of work on a loaded two-core machine, so a hang fails instead of waiting.
CHECK_TIMEOUT: Final = 30.0


async def check_frame_stream(open_pair: PairFactory, *, timeout: float = CHECK_TIMEOUT) -> None:
    """Check that the streams ``open_pair`` yields keep the whole :class:`FrameStream` contract.

    Every check runs on a fresh pair; those that send one way run twice, each end
    sending once. Raises ``AssertionError`` at the first broken promise.
    """
    for check in BOTH_WAYS_AT_ONCE:
        await _run("check_frame_stream", check, open_pair, flip=False, timeout=timeout)
    for check in ONE_WAY:
        for flip in (False, True):
            await _run("check_frame_stream", check, open_pair, flip=flip, timeout=timeout)


async def check_request_reply_stream(
    open_pair: PairFactory, *, timeout: float = CHECK_TIMEOUT
) -> None:
    """The part of the contract a request/reply transport (HTTP) keeps.

    The pair is ``(caller, answerer)``: the answerer sends only answers, one per
    frame it received and in the order it received them (an HTTP server's
    handler, wrapped as a stream, does exactly that). Frames may arrive in any
    order, an oversized request may be refused to its sender with
    :class:`~transports.FrameRejected` instead, and the answerer need not see
    the caller close.
    """
    for check in REQUEST_REPLY:
        await _run("check_request_reply_stream", check, open_pair, flip=False, timeout=timeout)


async def _run(
    suite: str, check: Check, open_pair: PairFactory, *, flip: bool, timeout: float
) -> None:
    way = "both ways" if check in BOTH_WAYS_AT_ONCE else "b to a" if flip else "a to b"
    where = f"{suite}: {check.__name__} ({way})"
    try:
        with anyio.fail_after(timeout), unwrap_single_error():
            async with open_pair() as (a, b):
                if flip:
                    a, b = b, a
                await check(a, b)
    except TimeoutError:
        raise AssertionError(f"{where}: not done within {timeout:g} s") from None
    except AssertionError as exc:
        raise AssertionError(f"{where}: {exc}") from exc
    except Exception as exc:
        exc.add_note(f"(in {where})")
        raise
