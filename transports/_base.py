"""The frame-stream interface every transport implements, and its errors.

A transport moves *frames*: the bytes of one message. It knows nothing of RPC,
JSON or retries. A stream is opened by an ``open_*`` async context manager (a
*connector*) or handed to the handler a server runs for each connection; either
way the owner of the ``async with`` owns every task the stream needs.
:mod:`transports.testing` checks that a stream keeps this contract.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "Connector",
    "FrameRejected",
    "FrameStream",
    "FrameTooLarge",
    "TransportClosed",
    "TransportError",
    "TransportInfo",
]

#: 1 MiB: large enough for any tool result we expect, small enough that a
#: misbehaving peer cannot make us buffer without bound.
DEFAULT_MAX_FRAME_SIZE = 1 << 20


@dataclass(frozen=True, slots=True)
class TransportInfo:
    """What a stream is, for error messages and logs (never a secret)."""

    kind: str  # "memory", "stdio", "http", "websocket"
    peer: str  # e.g. "pid 4242", "ws://127.0.0.1:8765/ws", "127.0.0.1:53211"


class TransportError(Exception):
    """Base class of the errors a transport raises."""


class TransportClosed(TransportError):
    """The stream is closed: no frame will arrive or leave any more.

    ``reason`` says why in words; the optional fields carry the evidence a user
    needs to act (a child's exit code and last stderr lines, a WebSocket close code).
    """

    def __init__(
        self,
        reason: str,
        *,
        exit_code: int | None = None,
        close_code: int | None = None,
        stderr_tail: Sequence[str] = (),
    ) -> None:
        self.reason = reason
        self.exit_code = exit_code
        self.close_code = close_code
        self.stderr_tail = tuple(stderr_tail)
        super().__init__(self.describe())

    def describe(self) -> str:
        text = self.reason
        if self.stderr_tail:
            text += "; last stderr: " + " | ".join(self.stderr_tail)
        return text


class FrameTooLarge(TransportError):
    """An incoming frame exceeded the size limit and was discarded.

    The stream stays usable. ``head`` and ``tail`` hold the frame's first and last
    bytes so the receiver can try to name the request it belonged to (a JSON-RPC
    answer often puts its ``id`` last: ``{"result": ..., "jsonrpc": "2.0", "id": 7}``).
    """

    def __init__(self, size: int, limit: int, head: bytes = b"", tail: bytes = b"") -> None:
        self.size = size
        self.limit = limit
        self.head = head
        self.tail = tail
        super().__init__(f"frame of {size} bytes exceeds the {limit}-byte limit")


class FrameRejected(TransportError):
    """The far end refused a frame we sent (an HTTP 4xx/5xx, say); the stream stays usable.

    ``head`` is the refused frame's start, so the sender can tell which call failed.
    """

    def __init__(self, status: int, message: str, head: bytes) -> None:
        self.status = status
        self.message = message
        self.head = head
        super().__init__(f"HTTP {status}: {message}")


@runtime_checkable
class FrameStream(Protocol):
    """A bidirectional stream of frames.

    Receiving: ``receive`` returns the next whole frame, in the order the far end
    sent them; it raises :class:`TransportClosed` once the stream has ended and
    :class:`FrameTooLarge` for a discarded frame over ``max_frame_size`` (after
    which it may be called again). One task receives at a time.

    Sending: ``send``, ``send_many`` and ``send_nowait`` may be called from several
    tasks at once; each call's frames go out whole and in order, and after the
    frames of any call that returned before it. They raise :class:`TransportClosed`
    once the stream can no longer carry frames (closed by either end).

    ``aclose`` is idempotent and bounded in time. Afterwards every method raises
    :class:`TransportClosed`, a task waiting in ``receive`` included. On a duplex
    stream the frames sent before it are still delivered, and then the far end's
    ``receive`` raises :class:`TransportClosed` too (a request/reply transport such
    as HTTP drops requests still in flight, and its server sees no close).
    """

    @property
    def info(self) -> TransportInfo: ...

    @property
    def max_frame_size(self) -> int: ...

    async def send(self, frame: bytes) -> None: ...

    async def send_many(self, frames: Sequence[bytes]) -> None:
        """Send several frames, as few writes as the transport allows.

        Frames that an earlier :meth:`send_nowait` left queued go out first, so
        ``send_many([])`` finishes what it started.
        """
        ...

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Take ``frames`` now, without waiting; True if nothing of them is left to write.

        The stream always takes all the frames: what it cannot write without
        blocking it queues, in order, ahead of anything sent later, and returns
        False. The caller must then await :meth:`send_many` (``send_many([])`` if
        it has nothing new) to finish the writing and learn of any error; until
        then queued frames may sit unsent. A transport with no non-blocking write
        queues everything and returns False. Raises :class:`TransportClosed` like
        ``send``.
        """
        ...

    async def receive(self) -> bytes: ...

    async def aclose(self) -> None: ...


#: Opens one stream; the stream lives as long as the ``async with``.
Connector = Callable[[], AbstractAsyncContextManager[FrameStream]]


class CloseCode(enum.IntEnum):
    """Every close code the mesh sends or reports, and what it means.

    Here rather than beside the WebSocket transport: code that only reads a close code
    (the mesh's error translation, a stdio agent) does not load websockets for it."""

    NORMAL = 1000
    """The link was closed on purpose."""
    GOING_AWAY = 1001
    """The daemon (or agent) is shutting down."""
    PROTOCOL_ERROR = 1002
    """The peer broke the WebSocket protocol."""
    ABNORMAL_CLOSURE = 1006
    """Never sent: reported when the connection dropped without a close frame."""
    INVALID_DATA = 1007
    """A text frame was not valid UTF-8 (RFC 6455 8.1); the connection is failed."""
    MESSAGE_TOO_BIG = 1009
    """A frame exceeded the hard size limit (see the module docstring)."""
    INTERNAL_ERROR = 1011
    """Something failed on our side, or the keepalive ping went unanswered."""
    UNAUTHORIZED = 4001
    """Missing, wrong or revoked token; nothing the connection sent was processed."""
    FORBIDDEN = 4003
    """The token is valid, but for another agent id (impersonation)."""
    NOT_FOUND = 4004
    """Nothing to watch there (e.g. an unknown room id)."""
    FELL_BEHIND = 4008
    """A watcher read too slowly and missed changes; reconnect for a fresh snapshot."""
    TAKEN_OVER = 4009
    """Another connection with a valid token took this agent id over (a rolling restart);
    the calls this one had in flight were answered first. Do not redial."""
    TOO_MANY = 4029
    """This token has as many streams open as it may (close one first), or holds the most
    of a full server's connections and this one was closed to give others their share."""
