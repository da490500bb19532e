"""The wire messages (the envelope of docs/protocol.md) as msgspec Structs, and the mesh codec.

One JSON object per frame, a tagged union on ``type``::

    {"type":"request","id":"<uuid4>","timestamp":1767772800000,
     "payload":{"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}}

The session never touches JSON: it holds a :class:`Codec`, so a second wire format
(JSON-RPC 2.0 as MCP speaks it) is one more class with the same two methods.
"""

from __future__ import annotations

import os
import random
import re
import time
from typing import Annotated, Any, Final, NewType, Protocol

import msgspec

from mesh._errors import ErrorCode

__all__ = [
    "MESH_CODEC",
    "Codec",
    "DecodeFailure",
    "ErrorInfo",
    "Heartbeat",
    "HeartbeatPayload",
    "MeshCodec",
    "Message",
    "Notification",
    "NotificationPayload",
    "Request",
    "RequestId",
    "RequestPayload",
    "Response",
    "ResponsePayload",
    "new_request_id",
    "now_ms",
    "salvage_id",
]

RequestId = NewType("RequestId", str)

# Ids we make are uuid4 strings; ids from peers are opaque strings (as in
# JSON-RPC), bounded so that a hostile peer cannot grow our tables' keys.
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
MethodName = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class RequestPayload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    method: MethodName
    params: Any = None


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class ResponsePayload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    success: bool
    result: Any = None
    error: ErrorInfo | None = None


class NotificationPayload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    method: MethodName
    params: Any = None


class HeartbeatPayload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    #: "Answer me": sent when we have heard nothing for a whole interval, so our
    #: liveness check does not depend on how often the peer beats on its own.
    reply: bool = False


_EMPTY_HEARTBEAT: Final = HeartbeatPayload()
ASK_HEARTBEAT: Final = HeartbeatPayload(reply=True)


#: W3C Trace Context: ``traceparent`` is 55 characters today; ``tracestate`` at most 512.
TraceParent = Annotated[str, msgspec.Meta(max_length=128)]
TraceState = Annotated[str, msgspec.Meta(max_length=512)]


class Request(
    msgspec.Struct, tag="request", tag_field="type", frozen=True, kw_only=True, omit_defaults=True
):
    id: Id
    timestamp: int
    payload: RequestPayload
    #: The caller's span (docs/observability.md): absent unless the caller traces, and
    #: ignored by peers that do not, so a traced and an untraced peer still talk.
    traceparent: TraceParent | None = None
    tracestate: TraceState | None = None


class Response(msgspec.Struct, tag="response", tag_field="type", frozen=True, kw_only=True):
    # ``None`` only when answering a frame whose id could not be read.
    id: Id | None
    timestamp: int
    payload: ResponsePayload


class Notification(msgspec.Struct, tag="notification", tag_field="type", frozen=True, kw_only=True):
    id: Id
    timestamp: int
    payload: NotificationPayload


class Heartbeat(msgspec.Struct, tag="heartbeat", tag_field="type", frozen=True, kw_only=True):
    id: Id
    timestamp: int
    payload: HeartbeatPayload = _EMPTY_HEARTBEAT


Message = Request | Response | Notification | Heartbeat


def now_ms() -> int:
    """Wall-clock epoch milliseconds, the envelope's ``timestamp``."""
    return time.time_ns() // 1_000_000


# uuid.uuid4() reads the OS's randomness and builds a UUID object for every id:
# ~5 us, a measurable share of a call. Ids only correlate messages (they are no
# secret), so a seeded PRNG supplies the same 122 random bits in a fifth of that.
_random = random.Random()
os.register_at_fork(after_in_child=_random.seed)  # a forked child must not repeat ids
_UUID4_MASK: Final = ~(0xF000 << 64) & ~(0xC000 << 48) & ((1 << 128) - 1)
_UUID4_BITS: Final = (0x4000 << 64) | (0x8000 << 48)  # version 4, RFC 4122 variant


def new_request_id() -> RequestId:
    """A fresh uuid4 string (random version-4 UUID in its canonical form)."""
    h = f"{_random.getrandbits(128) & _UUID4_MASK | _UUID4_BITS:032x}"
    return RequestId(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")


class DecodeFailure(Exception):
    """A frame that is not a valid message.

    ``code`` is PARSE_ERROR (not JSON) or INVALID_REQUEST (JSON, wrong shape);
    ``reason`` names what was wrong, with msgspec's path; ``request_id`` and
    ``kind`` are whatever could be salvaged, so the answer can be correlated and
    nobody answers a broken *response* (two peers could echo errors forever).
    """

    def __init__(
        self, code: ErrorCode, reason: str, *, request_id: str | None, kind: str | None
    ) -> None:
        self.code = code
        self.reason = reason
        self.request_id = request_id
        self.kind = kind
        super().__init__(reason)


class Codec(Protocol):
    """Turns messages into frames and back. Implementations are stateless."""

    name: str

    def encode(self, message: Message) -> bytes: ...

    def decode(self, frame: bytes) -> Message:
        """Decode one frame; raise :class:`DecodeFailure` if it is not a valid message."""
        ...

    def salvage(self, head: bytes, tail: bytes) -> tuple[str | None, str | None]:
        """Best-effort (id, kind) of a frame too large to read, from its first and last bytes."""
        ...


class _Salvage(msgspec.Struct):
    type: Any = None
    id: Any = None


_ID_PATTERN: Final = re.compile(rb'"id"\s*:\s*"([^"\\]{1,128})"')
_TYPE_PATTERN: Final = re.compile(rb'"type"\s*:\s*"([a-z]{1,32})"')
_SALVAGE_HEAD: Final = 512  # our encoder writes type and id first; peers usually do too


def salvage_id(head: bytes) -> tuple[str | None, str | None]:
    """Best-effort (id, type) from the first bytes of a frame that cannot be decoded."""
    head = head[:_SALVAGE_HEAD]
    id_match = _ID_PATTERN.search(head)
    type_match = _TYPE_PATTERN.search(head)
    try:
        request_id = id_match.group(1).decode() if id_match else None
    except UnicodeDecodeError:
        request_id = None  # an id we cannot read is not one to answer with
    return request_id, type_match.group(1).decode("ascii") if type_match else None


class MeshCodec:
    """The mesh's own JSON envelope (docs/protocol.md)."""

    name = "mesh"

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder()
        self._decoder: msgspec.json.Decoder[Message] = msgspec.json.Decoder(Message)
        self._salvager = msgspec.json.Decoder(_Salvage)

    def encode(self, message: Message) -> bytes:
        return self._encoder.encode(message)

    def salvage(self, head: bytes, tail: bytes) -> tuple[str | None, str | None]:
        return salvage_id(head)  # the envelope puts its type and id first

    def decode(self, frame: bytes) -> Message:
        try:
            message = self._decoder.decode(frame)
        except msgspec.ValidationError as exc:
            request_id, kind = self._salvage(frame)
            raise DecodeFailure(
                ErrorCode.INVALID_REQUEST,
                f"invalid message: {exc}",
                request_id=request_id,
                kind=kind,
            ) from None
        except msgspec.DecodeError as exc:
            request_id, kind = salvage_id(frame)
            raise DecodeFailure(
                ErrorCode.PARSE_ERROR, f"not valid JSON: {exc}", request_id=request_id, kind=kind
            ) from None
        except UnicodeDecodeError as exc:
            # msgspec checks UTF-8 only when it builds a string, and raises Python's own
            # error for it: bytes that are not UTF-8 are not JSON text (RFC 8259, 8.1).
            request_id, kind = salvage_id(frame)
            raise DecodeFailure(
                ErrorCode.PARSE_ERROR,
                f"not valid JSON: a string is not valid UTF-8 ({exc.reason})",
                request_id=request_id,
                kind=kind,
            ) from None
        except RecursionError:
            # msgspec recurses per nesting level; a 2 KB frame of brackets is enough.
            request_id, kind = salvage_id(frame)
            raise DecodeFailure(
                ErrorCode.INVALID_REQUEST,
                "invalid message: nested too deeply",
                request_id=request_id,
                kind=kind,
            ) from None
        if (
            type(message) is Response
            and not message.payload.success
            and message.payload.error is None
        ):
            raise DecodeFailure(
                ErrorCode.INVALID_REQUEST,
                "invalid message: a response with `success: false` needs an error"
                " - at `$.payload.error`",
                request_id=message.id,
                kind="response",
            )
        return message

    def _salvage(self, frame: bytes) -> tuple[str | None, str | None]:
        try:
            found = self._salvager.decode(frame)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            return salvage_id(frame)
        request_id = found.id if isinstance(found.id, str) and 0 < len(found.id) <= 128 else None
        kind = found.type if isinstance(found.type, str) else None
        return request_id, kind


#: The codec instance everything shares unless told otherwise (it is stateless).
MESH_CODEC: Final = MeshCodec()
