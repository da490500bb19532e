"""A2A's HTTP+JSON binding: RESTful URLs onto the methods the JSON-RPC binding has.

Each request becomes a method and its params (:func:`route`) and is answered by
:meth:`A2aServer.answer <mesh.a2a._server.A2aServer.answer>`, the one handler below
both bindings: the same door, owner, bounds and errors. What differs is only the
envelope: a result is the body itself, a stream's events are ``StreamResponse``
objects with no JSON-RPC around them, and an error is an HTTP status with
AIP-193's ``{"error": {code, status, message, details}}``, whose ``details`` hold
the ``google.rpc.ErrorInfo`` naming the A2A reason (A2A 1.0 §11.6, §5.4).

=====================================================  ==================================
 ``POST /message:send``, ``/message:stream``            SendMessage, SendStreamingMessage
 ``GET /tasks``, ``/tasks/{id}``                        ListTasks, GetTask (query params)
 ``POST /tasks/{id}:cancel``, ``/tasks/{id}:subscribe`` CancelTask, SubscribeToTask
 ``POST``/``GET /tasks/{id}/pushNotificationConfigs``   Create/List…PushNotificationConfig(s)
 ``GET``/``DELETE …/pushNotificationConfigs/{cid}``     Get/Delete…PushNotificationConfig
 ``GET /extendedAgentCard``                             GetExtendedAgentCard
=====================================================  ==================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

import msgspec

from mesh._input import UNREADABLE_JSON, whole_number, why_unreadable
from mesh.a2a._jsonrpc import DOMAIN, ERROR_INFO, REASONS, A2aError, Frame, Streamed, stream_cursor
from mesh.a2a._wire import Version, camel_keys
from transports import HttpRequest, HttpResponse

__all__ = ["Answerer", "handle_rest", "rest_error", "route"]

#: Each A2A error's HTTP status and AIP-193 status name (A2A 1.0 §5.4); JSON-RPC's own
#: codes (bad JSON, bad params) are a client's mistake, 400, or the server's, 500.
STATUSES: Final = {
    -32001: (404, "NOT_FOUND"),
    -32002: (409, "FAILED_PRECONDITION"),
    -32003: (400, "UNIMPLEMENTED"),
    -32004: (400, "UNIMPLEMENTED"),
    -32005: (415, "INVALID_ARGUMENT"),
    -32006: (502, "INTERNAL"),
    -32007: (400, "FAILED_PRECONDITION"),
    -32008: (400, "FAILED_PRECONDITION"),
    -32009: (400, "UNIMPLEMENTED"),
    -32600: (400, "INVALID_ARGUMENT"),
    -32601: (404, "NOT_FOUND"),
    -32602: (400, "INVALID_ARGUMENT"),
    -32603: (500, "INTERNAL"),
    -32700: (400, "INVALID_ARGUMENT"),
}
_PUSH: Final = "pushNotificationConfigs"
#: Query parameters that are numbers or booleans in the method's params (§11.5: a
#: query carries decimal strings and lower-case ``true``/``false``).
_NUMBERS: Final = frozenset({"historyLength", "pageSize"})
_FLAGS: Final = frozenset({"includeArtifacts"})


class Answerer(Protocol):
    """What this binding needs of the server below both bindings (``A2aServer``): its
    checks of a request, its answer to a method, and its streams."""

    def check_body(self, request: HttpRequest) -> None: ...

    def version(self, request: HttpRequest) -> Version: ...

    def stream_refused(self, method: str, caller: Any) -> HttpResponse | None: ...

    async def answer(
        self,
        method: str,
        params: dict[str, Any],
        agent: str,
        caller: Any,
        version: Version,
        *,
        cursor: int | None = None,
    ) -> Any: ...

    def stream(
        self, streamed: Streamed, version: Version, caller: Any, frame: Frame
    ) -> HttpResponse: ...


def rest_error(code: int, message: str) -> HttpResponse:
    """An A2A error as AIP-193 describes an HTTP error, ``ErrorInfo`` in its details."""
    status, name = STATUSES.get(code, (500, "INTERNAL"))
    info = {"@type": ERROR_INFO, "reason": REASONS.get(code, "UNKNOWN_ERROR"), "domain": DOMAIN}
    error = {
        "code": status,
        "status": name,
        "message": message,
        "details": [{**info, "metadata": {}}],
    }
    return HttpResponse(status, msgspec.json.encode({"error": error}))


#: The methods by verb and path, a ``*`` for a segment that is an id.
_METHODS: Final = {
    ("POST", "message:send"): "SendMessage",
    ("POST", "message:stream"): "SendStreamingMessage",
    ("GET", "tasks"): "ListTasks",
    ("GET", "tasks", "*"): "GetTask",
    ("POST", "tasks", "*", _PUSH): "CreateTaskPushNotificationConfig",
    ("GET", "tasks", "*", _PUSH): "ListTaskPushNotificationConfigs",
    ("GET", "tasks", "*", _PUSH, "*"): "GetTaskPushNotificationConfig",
    ("DELETE", "tasks", "*", _PUSH, "*"): "DeleteTaskPushNotificationConfig",
    ("GET", "extendedAgentCard"): "GetExtendedAgentCard",
}


def route(verb: str, path: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The method a request's verb and path (the segments under the agent's base URL)
    name, and the params its path gives; :class:`A2aError` when it names none."""
    ids = list(path[1::2]) if list(path[:1]) == ["tasks"] else []
    if verb == "POST" and len(path) == 2 and ids:
        return _task_action(path[1])
    shape = tuple("*" if ids and i % 2 else p for i, p in enumerate(path))
    method = _METHODS.get((verb, *shape))
    if method is None:
        raise A2aError(-32601, f"no A2A operation is {verb} /{'/'.join(path)}")
    if len(path) == 2:  # the task itself
        return method, {"id": ids[0]}
    return method, dict(zip(("taskId", "id"), ids, strict=False))


def _task_action(action: str) -> tuple[str, dict[str, Any]]:
    """``{id}:cancel`` or ``{id}:subscribe`` (a custom method, in AIP-136's form)."""
    task, _, verb = action.rpartition(":")
    methods = {"cancel": "CancelTask", "subscribe": "SubscribeToTask"}
    if not task or verb not in methods:
        raise A2aError(-32601, f"no A2A operation is POST /tasks/{action}")
    return methods[verb], {"id": task}


def query_params(query: Mapping[str, list[str]]) -> dict[str, Any]:
    """A GET's query as the method's params: numbers and flags as JSON would hold them
    (a value that is neither stays a string, which the method refuses by name)."""
    params: dict[str, Any] = {}
    for key, values in camel_keys({k: v for k, v in query.items() if v}).items():
        value: Any = values[-1]
        if key in _NUMBERS:
            number = whole_number(value)
            value = value if number is None else number
        elif key in _FLAGS and value in ("true", "false"):
            value = value == "true"
        params[key] = value
    return params


def body_params(body: bytes) -> dict[str, Any]:
    """A POST's JSON body (an object; none at all is no params)."""
    if not body.strip():
        return {}
    try:
        value = msgspec.json.decode(body)
    except UNREADABLE_JSON as exc:
        raise A2aError(-32700, f"the body is not JSON: {why_unreadable(exc)}") from None
    if not isinstance(value, dict):
        raise A2aError(-32602, "the body must be a JSON object (the method's request)")
    result: dict[str, Any] = camel_keys(value)
    return result


async def handle_rest(
    server: Answerer, request: HttpRequest, agent: str, caller: Any, path: Sequence[str]
) -> HttpResponse:
    """Answer one HTTP+JSON request to ``agent``; ``path`` is its URL's segments under
    the agent's base (``("tasks", "t1:cancel")``)."""
    try:
        method, fixed = route(request.method, path)
        server.check_body(request)
        version = server.version(request)
        given = body_params(request.body) if request.method == "POST" else {}
        params = {**given, **query_params(request.query), **fixed}
        refused = server.stream_refused(method, caller)
        if refused is not None:
            return refused
        cursor = stream_cursor(request)
        answer = await server.answer(method, params, agent, caller, version, cursor=cursor)
    except A2aError as exc:
        return rest_error(exc.code, str(exc))
    if isinstance(answer, Streamed):
        return server.stream(answer, version, caller, msgspec.json.encode)
    return HttpResponse(200, msgspec.json.encode({} if answer is None else answer))
