"""JSON-RPC plumbing of the A2A endpoint: decoding a request, answers and errors, and
server-sent events (a task's numbered events from a cursor, with keepalives)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
import msgspec

from mesh._input import UNREADABLE_JSON, whole_number, why_unreadable
from mesh.a2a._tasks import Task
from mesh.a2a._wire import Version, event_for
from transports import BodyWriter, HttpRequest, HttpResponse

__all__ = [
    "A2aError",
    "Frame",
    "Streamed",
    "decode_call",
    "param_dict",
    "param_int",
    "pump",
    "rpc_error",
    "rpc_result",
    "stream_cursor",
]

#: An idle stream gets a comment this often, so a client that left is noticed.
KEEPALIVE: Final = 15.0
#: Each error's reason, as A2A names it: clients pick the error by it, not by the code.
REASONS: Final = {
    -32001: "TASK_NOT_FOUND",
    -32002: "TASK_NOT_CANCELABLE",
    -32003: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    -32004: "UNSUPPORTED_OPERATION",
    -32005: "CONTENT_TYPE_NOT_SUPPORTED",
    -32006: "INVALID_AGENT_RESPONSE",
    -32007: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    -32008: "EXTENSION_SUPPORT_REQUIRED",
    -32009: "VERSION_NOT_SUPPORTED",
    -32600: "INVALID_REQUEST",
    -32601: "METHOD_NOT_FOUND",
    -32602: "INVALID_PARAMS",
    -32603: "INTERNAL_ERROR",
    -32700: "INVALID_REQUEST",
}
ERROR_INFO: Final = "type.googleapis.com/google.rpc.ErrorInfo"
DOMAIN: Final = "a2a-protocol.org"


class A2aError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def rpc_result(rpc_id: Any, result: Any) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": rpc_id, "result": result})


def rpc_error(rpc_id: Any, code: int, message: str) -> HttpResponse:
    """A JSON-RPC error whose ``data`` holds the ``ErrorInfo`` A2A requires of every error."""
    info = {"@type": ERROR_INFO, "reason": REASONS.get(code, "UNKNOWN_ERROR"), "domain": DOMAIN}
    error = {"code": code, "message": message, "data": [{**info, "metadata": {}}]}
    return HttpResponse(200, msgspec.json.encode({"jsonrpc": "2.0", "id": rpc_id, "error": error}))


def param_dict(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise A2aError(-32602, f"`{what}` must be an object")
    return value


def param_int(params: dict[str, Any], key: str, low: int, high: int) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise A2aError(-32602, f"`params.{key}` must be an integer from {low} to {high}")
    return value


@dataclass(frozen=True, slots=True)
class Streamed:
    """An answer that is a stream: ``task``'s events after ``cursor`` (None: the task
    itself first), sent as server-sent events by whichever binding asked."""

    task: Task
    cursor: int | None
    #: Until the task finishes (SubscribeToTask), not only until it rests: a send's
    #: stream ends where the client must answer, a subscriber's goes on past it.
    to_the_end: bool = False


#: Makes one streamed object the ``data`` of its event: the binding's envelope.
Frame = Callable[[Any], bytes]


async def pump(streamed: Streamed, version: Version, frame: Frame, write: BodyWriter) -> None:
    """Every event of the task after the cursor as server-sent events, until it rests
    (or, ``to_the_end``, finishes)."""
    task, cursor = streamed.task, streamed.cursor
    while True:
        changed = task.changed
        if cursor is None or cursor + 1 < task.oldest_event:
            # New, or so far behind that the log moved on: the task itself says it all.
            cursor = task.last_event
            snapshot = {"task": task.snapshot()}
            await write(_sse(cursor, frame(event_for(snapshot, version))))
            continue
        batch = list(task.events_after(cursor))
        for number, event in batch:
            cursor = number
            await write(_sse(number, frame(event_for(event, version))))
        if batch:
            continue  # more may have come while these were written
        if task.finished or (task.resting and not streamed.to_the_end):
            return
        with anyio.move_on_after(KEEPALIVE) as idle:
            await changed.wait()
        if idle.cancelled_caught:
            await write(b": keepalive\n\n")


def _sse(number: int, data: bytes) -> bytes:
    return b"id: %d\ndata: %s\n\n" % (number, data)


def stream_cursor(request: HttpRequest) -> int | None:
    return whole_number((request.header("last-event-id") or "").strip())


def decode_call(body: bytes) -> dict[str, Any]:
    try:
        call = msgspec.json.decode(body)
    except UNREADABLE_JSON as exc:
        raise A2aError(-32700, f"the body is not JSON: {why_unreadable(exc)}") from None
    if not isinstance(call, dict) or call.get("jsonrpc") != "2.0":
        raise A2aError(-32600, 'not a JSON-RPC 2.0 request (an object with "jsonrpc": "2.0")')
    if not isinstance(call.get("method"), str):
        raise A2aError(-32600, "`method` must be a string")
    rpc_id = call.get("id")
    if rpc_id is not None and (isinstance(rpc_id, bool) or not isinstance(rpc_id, str | int)):
        raise A2aError(-32600, "`id` must be a string, a number or null")
    return call
