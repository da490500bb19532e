"""MCP's wire format, JSON-RPC 2.0, as a second :class:`~mesh.protocol.Codec`.

The session correlates, times out, cancels and reports progress in terms of the
mesh's own messages; this codec translates them to and from the frames MCP peers
speak, so an MCP link gets the same machinery as a mesh link:

- **Ids.** JSON-RPC ids are integers or strings (``0`` included) and must come
  back exactly as sent. The session keys its tables by string, so an integer id
  ``5`` becomes the key ``"#5"`` and a string id that starts with ``#`` gains one
  more (``"#x"`` -> ``"##x"``); everything else is itself. The map is its own
  inverse on the way out, needs no table, and our own ids (uuid4s) never start
  with ``#``.
- **Cancel and progress.** The session's ``cancelled`` and ``progress`` are MCP's
  ``notifications/cancelled`` (``requestId``) and ``notifications/progress``
  (``progressToken``). A ``tools/call`` we send names its progress token after its
  request id, so the server's progress is the session's progress for that call
  (and pushes its deadline out, as on a mesh link).
- **Heartbeats.** MCP has ``ping`` and no heartbeat: a heartbeat goes out as a
  ``ping`` whose id marks it, and any answer to it (a result, or the "method not
  found" a 2026-07-28 server gives) comes back as a heartbeat.
- **Trace context.** A request's ``traceparent``/``tracestate`` travel in its
  ``params._meta`` both ways, where MCP peers that trace put them.
- **Batches** are refused with one error naming why: MCP dropped JSON-RPC batching
  in 2025-06-18, and the revisions we speak have none.

Messages are small msgspec Structs (decoded once, no dict walking), not the ``mcp``
SDK's pydantic models: those cost more per message than the mesh's whole call and
would make the SDK a runtime dependency.
"""

from __future__ import annotations

import re
from typing import Any, Final, TypeGuard, cast

import msgspec
from msgspec import UNSET, UnsetType

from mesh._errors import ErrorCode
from mesh.protocol import (
    DecodeFailure,
    ErrorInfo,
    Heartbeat,
    Message,
    Notification,
    NotificationPayload,
    Request,
    RequestPayload,
    Response,
    ResponsePayload,
)

__all__ = [
    "HEARTBEAT_ID_PREFIX",
    "MCP_CODEC",
    "McpCodec",
    "from_wire_id",
    "salvage_ends",
    "salvage_text",
    "to_wire_id",
]

JSONRPC: Final = "2.0"
#: Ids of the ``ping`` requests that carry the session's heartbeats.
HEARTBEAT_ID_PREFIX: Final = "mesh-heartbeat:"
_INT: Final = "#"
# Same bounds as the mesh envelope: a hostile peer cannot grow our tables' keys.
_MAX_ID_LENGTH: Final = 128
_MAX_INT_ID: Final = 2**63
_MAX_METHOD_LENGTH: Final = 256
#: W3C Trace Context in ``_meta``: the bounds the mesh envelope puts on the same fields.
_MAX_TRACEPARENT: Final = 128
_MAX_TRACESTATE: Final = 512

_CANCELLED_MESH: Final = "cancelled"
_PROGRESS_MESH: Final = "progress"
CANCELLED: Final = "notifications/cancelled"
PROGRESS: Final = "notifications/progress"


def from_wire_id(value: int | str) -> str:
    """A JSON-RPC id as the session's key (see the module docstring)."""
    if type(value) is int:
        return f"{_INT}{value}"
    assert isinstance(value, str)
    return _INT + value if value.startswith(_INT) else value


def to_wire_id(key: str) -> int | str:
    """The session's key back to the JSON-RPC id it stands for."""
    if key.startswith(_INT):
        rest = key[1:]
        return rest if rest.startswith(_INT) else int(rest)
    return key


# -- the frames -----------------------------------------------------------------------


class _ErrorObject(msgspec.Struct, frozen=True, omit_defaults=True):
    code: int
    message: str
    data: Any = UNSET


class _Frame(msgspec.Struct, frozen=True):
    """Any JSON-RPC message: which fields are present says which kind it is."""

    jsonrpc: str | UnsetType = UNSET
    id: int | str | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: Any = UNSET
    result: Any = UNSET
    error: _ErrorObject | UnsetType = UNSET


class _OutRequest(msgspec.Struct, frozen=True):
    jsonrpc: str
    id: int | str
    method: str
    params: Any = UNSET


class _OutNotification(msgspec.Struct, frozen=True):
    jsonrpc: str
    method: str
    params: Any = UNSET


class _OutResult(msgspec.Struct, frozen=True):
    jsonrpc: str
    id: int | str
    result: Any


class _OutError(msgspec.Struct, frozen=True):
    jsonrpc: str
    id: int | str | None
    error: _ErrorObject


class _Salvage(msgspec.Struct):
    id: Any = None
    method: Any = None
    result: Any = UNSET
    error: Any = UNSET


_ID_PATTERN: Final = re.compile(rb'"id"\s*:\s*(-?\d{1,19}(?![\d.eE])|"[^"\\]{1,128}")')
_SALVAGE_HEAD: Final = 512


def salvage_text(head: bytes) -> tuple[str | None, str | None]:
    """Best-effort (id key, kind) from the start of a frame that is not JSON."""
    head = head[:_SALVAGE_HEAD]
    match = _ID_PATTERN.search(head)
    key = None
    if match:
        raw = match.group(1)
        key = from_wire_id(raw[1:-1].decode("utf-8", "replace") if raw[:1] == b'"' else int(raw))
    if b'"method"' in head:
        kind = "request"
    elif b'"result"' in head or b'"error"' in head:
        kind = "response"
    else:
        kind = None
    return key, kind


_ID_VALUE: Final = rb'(-?\d{1,19}(?![\d.eE])|"[^"\\]{1,128}")'
#: The members before an answer's or a request's big value: ``{"jsonrpc":"2.0","id":7,"result"``.
_TOP_PREFIX: Final = re.compile(
    rb'\s*\{(?P<before>(?:\s*"(?:jsonrpc|id)"\s*:\s*(?:' + _ID_VALUE + rb")\s*,)*)"
    rb'\s*"(?P<key>result|error|method)"\s*:'
)
#: An id as the object's last member (before or after ``"jsonrpc"``), as the TypeScript
#: SDK writes its answers: ``{"result":{...},"jsonrpc":"2.0","id":7}``.
_TAIL_ID: Final = re.compile(
    rb'[,{]\s*"id"\s*:\s*' + _ID_VALUE + rb'\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*$'
)


def salvage_ends(head: bytes, tail: bytes) -> tuple[str | None, str | None]:
    """(id key, kind) of a frame too large to read, from its first and last bytes.

    The kind comes from the members that open the object (``result``/``error``: an
    answer; ``method``: a request), never from words deep inside a value, so a file's
    text that says ``"method"`` does not make an answer look like a request.
    """
    opening = _TOP_PREFIX.match(head[:_SALVAGE_HEAD])
    if opening is None:
        return salvage_text(head)
    kind = "request" if opening.group("key") == b"method" else "response"
    key, _ = salvage_text(opening.group("before"))
    if key is None:
        closing = _TAIL_ID.search(tail[-_SALVAGE_HEAD:])
        if closing is not None:
            raw = closing.group(1)
            wire = raw[1:-1].decode("utf-8", "replace") if raw[:1] == b'"' else int(raw)
            key = from_wire_id(wire)
    return key, kind


def _valid_id(value: Any) -> TypeGuard[int | str]:
    if type(value) is int:
        return -_MAX_INT_ID <= value < _MAX_INT_ID
    return isinstance(value, str) and 0 < len(value) <= _MAX_ID_LENGTH


class McpCodec:
    """JSON-RPC 2.0 as MCP speaks it. Stateless, like every codec."""

    name = "mcp"

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(_Frame)
        self._salvager = msgspec.json.Decoder(_Salvage)

    # -- out --------------------------------------------------------------------------

    def encode(self, message: Message) -> bytes:
        kind = type(message)
        if kind is Request:
            assert isinstance(message, Request)
            payload = message.payload
            params = payload.params
            if payload.method == "tools/call" and isinstance(params, dict):
                params = _with_progress_token(params, message.id)
            if message.traceparent is not None and (params is None or isinstance(params, dict)):
                params = _with_trace(params or {}, message.traceparent, message.tracestate)
            wire = _OutRequest(
                JSONRPC,
                to_wire_id(message.id),
                payload.method,
                UNSET if params is None else params,
            )
            return self._encoder.encode(wire)
        if kind is Response:
            assert isinstance(message, Response)
            return self._encoder.encode(_response(message))
        if kind is Notification:
            assert isinstance(message, Notification)
            return self._encoder.encode(_notification(message.payload))
        # A heartbeat is a ping whose answer, whatever it is, proves the peer alive.
        beat = cast(Heartbeat, message)
        ping = _OutRequest(JSONRPC, HEARTBEAT_ID_PREFIX + beat.id, "ping")
        return self._encoder.encode(ping)

    # -- in ---------------------------------------------------------------------------

    def salvage(self, head: bytes, tail: bytes) -> tuple[str | None, str | None]:
        return salvage_ends(head, tail)

    def decode(self, frame: bytes) -> Message:
        try:
            wire = self._decoder.decode(frame)
        except msgspec.ValidationError as exc:
            if frame.lstrip()[:1] == b"[":
                raise _batch() from None
            key, kind = self._salvage(frame)
            raise DecodeFailure(
                ErrorCode.INVALID_REQUEST, f"invalid message: {exc}", request_id=key, kind=kind
            ) from None
        except msgspec.DecodeError as exc:
            key, kind = salvage_text(frame)
            raise DecodeFailure(
                ErrorCode.PARSE_ERROR, f"not valid JSON: {exc}", request_id=key, kind=kind
            ) from None
        except RecursionError:
            key, kind = salvage_text(frame)
            raise DecodeFailure(
                ErrorCode.INVALID_REQUEST,
                "invalid message: nested too deeply",
                request_id=key,
                kind=kind,
            ) from None
        return _classify(wire)

    def _salvage(self, frame: bytes) -> tuple[str | None, str | None]:
        try:
            found = self._salvager.decode(frame)
        except (msgspec.DecodeError, RecursionError):
            return salvage_text(frame)
        key = from_wire_id(found.id) if _valid_id(found.id) else None
        if found.method is not None:
            return key, "request"
        if found.result is not UNSET or found.error is not UNSET:
            return key, "response"
        return key, None


def _batch() -> DecodeFailure:
    return DecodeFailure(
        ErrorCode.INVALID_REQUEST,
        "invalid message: JSON-RPC batches are not supported (MCP removed them in"
        " 2025-06-18); send one message per frame - at `$`",
        request_id=None,
        kind=None,
    )


def _invalid(reason: str, wire: _Frame, kind: str | None) -> DecodeFailure:
    key = from_wire_id(wire.id) if _valid_id(wire.id) else None
    return DecodeFailure(
        ErrorCode.INVALID_REQUEST, f"invalid message: {reason}", request_id=key, kind=kind
    )


def _classify(wire: _Frame) -> Message:
    has_method = wire.method is not UNSET
    is_response = wire.result is not UNSET or wire.error is not UNSET
    kind = "request" if has_method else ("response" if is_response else None)
    if wire.jsonrpc != JSONRPC:
        raise _invalid('`jsonrpc` must be "2.0" - at `$.jsonrpc`', wire, kind)
    if has_method:
        return _classify_call(wire)
    if is_response:
        return _classify_response(wire)
    raise _invalid(
        "neither a request (`method`, `id`), a notification (`method`) nor a response"
        " (`result` or `error`, `id`) - at `$`",
        wire,
        None,
    )


def _classify_call(wire: _Frame) -> Request | Notification:
    method = wire.method
    assert isinstance(method, str)
    if not 0 < len(method) <= _MAX_METHOD_LENGTH:
        raise _invalid(
            f"a method name must be 1 to {_MAX_METHOD_LENGTH} characters - at `$.method`",
            wire,
            "request",
        )
    params = None if wire.params is UNSET else wire.params
    if wire.id is UNSET:
        return _incoming_notification(method, params)
    if wire.id is None:
        raise _invalid("a request's `id` cannot be null - at `$.id`", wire, "request")
    if not _valid_id(wire.id):
        raise _invalid(
            "`id` must be a string of 1 to 128 characters or a 64-bit integer - at `$.id`",
            wire,
            "request",
        )
    payload = RequestPayload(method=method, params=params)
    parent, state = _trace_of(params)
    return Request(
        id=from_wire_id(wire.id),
        timestamp=0,
        payload=payload,
        traceparent=parent,
        tracestate=state,
    )


def _classify_response(wire: _Frame) -> Response | Heartbeat:
    if wire.result is not UNSET and wire.error is not UNSET:
        raise _invalid("a response has `result` or `error`, not both - at `$`", wire, "response")
    if wire.id is UNSET or (wire.id is None and wire.error is UNSET):
        raise _invalid("a response needs the `id` it answers - at `$.id`", wire, "response")
    if wire.id is not None and not _valid_id(wire.id):
        raise _invalid("`id` is not one we could have sent - at `$.id`", wire, "response")
    if isinstance(wire.id, str) and wire.id.startswith(HEARTBEAT_ID_PREFIX):
        return Heartbeat(id=wire.id.removeprefix(HEARTBEAT_ID_PREFIX) or "-", timestamp=0)
    key = None if wire.id is None else from_wire_id(wire.id)
    if isinstance(wire.error, _ErrorObject):
        error = wire.error
        data = None if error.data is UNSET else error.data
        info = ErrorInfo(code=error.code, message=error.message, data=data)
        return Response(id=key, timestamp=0, payload=ResponsePayload(success=False, error=info))
    return Response(id=key, timestamp=0, payload=ResponsePayload(success=True, result=wire.result))


def _incoming_notification(method: str, params: Any) -> Notification:
    if method == CANCELLED and isinstance(params, dict):
        target = params.get("requestId")
        if _valid_id(target):
            reason = params.get("reason")
            params = {"id": from_wire_id(target), "reason": reason or "cancelled by the peer"}
            method = _CANCELLED_MESH
    elif method == PROGRESS and isinstance(params, dict):
        token = params.get("progressToken")
        if _valid_id(token):
            params = {k: v for k, v in params.items() if k != "progressToken"}
            params["id"] = from_wire_id(token)
            method = _PROGRESS_MESH
    return Notification(
        id="-", timestamp=0, payload=NotificationPayload(method=method, params=params)
    )


# -- out, by kind -----------------------------------------------------------------------


def _with_progress_token(params: dict[str, Any], key: str) -> dict[str, Any]:
    meta = params.get("_meta")
    if isinstance(meta, dict):
        if "progressToken" in meta:
            return params  # the caller chose its own token
        return {**params, "_meta": {**meta, "progressToken": to_wire_id(key)}}
    return {**params, "_meta": {"progressToken": to_wire_id(key)}}


def _with_trace(params: dict[str, Any], parent: str, state: str | None) -> dict[str, Any]:
    """The caller's span in ``params._meta`` (``traceparent``, ``tracestate``), as MCP
    peers that trace read it; the keys are W3C Trace Context's."""
    meta = params.get("_meta")
    trace = {"traceparent": parent, **({"tracestate": state} if state else {})}
    return {**params, "_meta": {**meta, **trace} if isinstance(meta, dict) else trace}


def _trace_of(params: Any) -> tuple[str | None, str | None]:
    """(traceparent, tracestate) from ``params._meta``, when they are there and in bounds."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return None, None
    parent, state = meta.get("traceparent"), meta.get("tracestate")
    if not isinstance(parent, str) or not 0 < len(parent) <= _MAX_TRACEPARENT:
        return None, None
    if not isinstance(state, str) or len(state) > _MAX_TRACESTATE:
        state = None
    return parent, state or None


def _response(message: Response) -> _OutResult | _OutError:
    payload = message.payload
    wire_id = None if message.id is None else to_wire_id(message.id)
    if payload.success and wire_id is not None:
        # MCP results are objects; a handler that returned nothing answered `{}`.
        return _OutResult(JSONRPC, wire_id, {} if payload.result is None else payload.result)
    info = payload.error or ErrorInfo(code=ErrorCode.INTERNAL_ERROR, message="no result")
    data = UNSET if info.data is None else info.data
    return _OutError(JSONRPC, wire_id, _ErrorObject(info.code, info.message, data))


def _notification(payload: NotificationPayload) -> _OutNotification:
    method, params = payload.method, payload.params
    if method == _CANCELLED_MESH and isinstance(params, dict) and "id" in params:
        params = {"requestId": to_wire_id(params["id"]), "reason": params.get("reason")}
        method = CANCELLED
    elif method == _PROGRESS_MESH and isinstance(params, dict) and "id" in params:
        params = {k: v for k, v in params.items() if k != "id"}
        params["progressToken"] = to_wire_id(payload.params["id"])
        method = PROGRESS
    return _OutNotification(JSONRPC, method, UNSET if params is None else params)


#: The codec instance everything shares (it is stateless).
MCP_CODEC: Final = McpCodec()
