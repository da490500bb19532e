"""``/mcp`` on the daemon: MCP's streamable HTTP, server side.

One JSON-RPC message per ``POST``; the answer is the response body (JSON), or an
SSE stream for a ``tools/call`` from a client that accepts ``text/event-stream`` and
may hear from the agent mid-call (it asks for progress, set a log level, or declared
it can be asked): the progress, log lines and requests (elicitation, sampling) as
they come, then its result. The client POSTs its answer to such a request as a
JSON-RPC response, which goes to the call waiting for it (:mod:`mesh.mcp._asks`). A
handshake-era client's ``initialize`` opens a session (``Mcp-Session-Id`` in
the answer, required on every later request, ended by ``DELETE``); a 2026-07-28
request carries everything it needs and gets no session. Notifications are
answered ``202``. Each message runs through :class:`~mesh._rpc.exchange.Exchange`
with the MCP codec, so bad JSON, batches and unknown methods get JSON-RPC errors
naming why.

Not offered, and refused plainly: the ``GET`` stream (405: this server keeps no
connection open per client; a session's ``list_changed`` and the resource updates
it subscribed to instead ride, as events, in front of the answer to its next request,
when it accepts ``text/event-stream``) and 2026-07-28's ``subscriptions/listen`` (use ``mesh mcp``,
whose link is a stream). Bounds: at most ``max_sessions_per_owner`` sessions per
owner (a new one closes that owner's least recently used: no one else's), at most
``max_sessions`` in all (past it a new session is refused with 503, never made by
evicting another owner's), each forgotten after ``session_idle`` seconds unused;
bodies are bounded by the daemon's ``max_body_size``.
"""

from __future__ import annotations

import math
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeGuard

import anyio
import msgspec

from mesh._errors import ErrorCode, MethodNotFound
from mesh._input import UNREADABLE_JSON
from mesh._orchestrator.access import NOBODY, Principal
from mesh._rpc.exchange import Exchange
from mesh._rpc.peer import RequestContext
from mesh.mcp._catalog import Authorize, Catalog
from mesh.mcp._codec import MCP_CODEC, from_wire_id
from mesh.mcp._revisions import MODERN, requested_revision
from mesh.mcp._server import McpServer, serve_config
from transports import BodyWriter, HttpRequest, HttpResponse

__all__ = ["McpHttpEndpoint", "jsonrpc_refusal"]

#: Sessions kept at once; one client normally holds one.
DEFAULT_MAX_SESSIONS: Final = 256
DEFAULT_MAX_SESSIONS_PER_OWNER: Final = 16
#: A session unused this long is forgotten (its client gets 404 and starts again).
DEFAULT_SESSION_IDLE: Final = 3600.0
_SESSION_HEADER: Final = "mcp-session-id"
CANCELLED: Final = "notifications/cancelled"
_LIST_CHANGED_FRAME: Final = b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}'


class _Peek(msgspec.Struct):
    id: Any = None
    method: Any = None
    params: Any = None
    result: Any = None
    error: Any = None

    @property
    def answers(self) -> bool:
        """A JSON-RPC response: the client's answer to a request the server sent it."""
        return self.method is None and _is_id(self.id) and (self.result, self.error) != (None, None)


_peek = msgspec.json.Decoder(_Peek).decode


class _HttpServer(McpServer):
    """An MCP server whose link cannot stream: no ``subscriptions/listen``."""

    def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        if method == "subscriptions/listen":
            raise MethodNotFound(
                "subscriptions/listen needs a stream, which /mcp does not hold open;"
                " run `mesh mcp` (stdio) to hear of changes"
            )
        return super().handle_request(ctx, method, params)


@dataclass(slots=True)
class _Session:
    server: _HttpServer
    exchange: Exchange
    last_used: float
    seen_version: int
    owner: str | None  # whoever opened it; nobody else may use it


def _rpc_error(status: int, code: int, message: str, request_id: Any = None) -> HttpResponse:
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return HttpResponse(status, msgspec.json.encode(error))


def jsonrpc_refusal(request: HttpRequest, refused: HttpResponse) -> HttpResponse:
    """A 401/403 for ``/mcp`` as MCP clients can show it: a JSON-RPC error saying the
    token is missing, refused or short of a right (status and headers kept)."""
    try:
        said = msgspec.json.decode(refused.body)
        message = str(said["error"]["message"])
    except (msgspec.DecodeError, KeyError, TypeError):
        message = "refused"
    try:
        request_id = _peek(request.body).id
    except UNREADABLE_JSON:
        request_id = None
    code = ErrorCode.UNAUTHORIZED if refused.status == 401 else ErrorCode.FORBIDDEN
    answer = _rpc_error(refused.status, code, message, request_id if _is_id(request_id) else None)
    return HttpResponse(answer.status, answer.body, headers=refused.headers)


def _is_id(value: Any) -> TypeGuard[int | str]:
    """A JSON-RPC id (``True`` is not ``1`` here)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _notification(method: str, params: Any) -> bytes:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        frame["params"] = params
    return msgspec.json.encode(frame)


def _sse(*frames: bytes) -> bytes:
    return b"".join(b"event: message\ndata: " + frame + b"\n\n" for frame in frames)


#: Runs one POST's exchange: the answer and whether the frame was invalid; what the
#: handler sends before it goes to the callback given (an SSE answer's events).
_Run = Callable[..., Awaitable[tuple[bytes | None, bool]]]


def _streams(request: HttpRequest, peek: _Peek, session: _Session | None) -> bool:
    """Whether a POST is answered with an SSE stream: a ``tools/call`` from a client that
    accepts ``text/event-stream`` and asks for progress (``_meta.progressToken``) or may
    hear from the agent mid-call (it set a log level, or declared it can be asked), so
    what the agent sends reaches the client before the result. Everything else gets JSON."""
    if peek.method != "tools/call" or not isinstance(peek.params, dict):
        return False
    if "text/event-stream" not in (request.header("accept") or ""):
        return False
    if session is not None and session.server.client.hears_mid_call:
        return True
    meta = peek.params.get("_meta")
    return isinstance(meta, dict) and meta.get("progressToken") is not None


def _streamed(run: _Run, headers: list[tuple[str, str]], owed: list[bytes]) -> HttpResponse:
    """An SSE answer: each frame the call sends as it is sent, then its answer; the
    stream ends with the answer. A client that leaves cancels the call."""

    async def produce(write: BodyWriter) -> None:
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)

        async def call() -> None:
            with send:
                answer, _ = await run(on_notification=send.send_nowait)
                if answer is not None:
                    send.send_nowait(answer)

        if owed:
            await write(_sse(*owed))
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with receive:
                async for frame in receive:
                    await write(_sse(frame))

    return HttpResponse(200, content_type="text/event-stream", headers=headers, stream=produce)


def _take_answer(session: _Session, peek: _Peek, body: bytes) -> HttpResponse:
    """The client's answer to a request sent on a call's stream (an elicitation, a
    sampling request): to the call waiting for it, or refused if none waits any more."""
    if session.exchange.take_answer(from_wire_id(peek.id), body):
        return HttpResponse(202)
    return _rpc_error(
        400,
        ErrorCode.INVALID_REQUEST,
        f"no request {peek.id!r} of this server waits for an answer: the call it belonged to"
        " has ended (finished, cancelled or past its deadline)",
        peek.id,
    )


class McpHttpEndpoint:
    """Answers ``/mcp`` requests for one daemon (see the module docstring)."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_sessions_per_owner: int = DEFAULT_MAX_SESSIONS_PER_OWNER,
        session_idle: float = DEFAULT_SESSION_IDLE,
    ) -> None:
        self._catalog = catalog
        self._max_sessions = max_sessions
        self._max_per_owner = max_sessions_per_owner
        self._idle = session_idle
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        # Sessionless (2026-07-28) requests in flight, by owner and JSON-RPC id: each
        # runs in an exchange of its own, so a `notifications/cancelled` POSTed after
        # it finds it here. Keyed by owner, so a client can only stop its own calls;
        # an entry lives exactly as long as its request, so connections bound the map.
        self._in_flight: dict[tuple[str | None, int | str], anyio.CancelScope] = {}

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    async def handle(
        self,
        request: HttpRequest,
        *,
        owner: str | None = None,
        authorize: Authorize | None = None,
        caller: Any = None,
        on_behalf_of: Principal = NOBODY,
    ) -> HttpResponse:
        """Answer one request. ``owner`` names the caller (a session opened by one
        owner is unknown to every other); ``authorize`` says what it may call and
        ``caller`` is handed to the extra tools; agents' tools are called
        ``on_behalf_of`` (see :class:`~mesh.mcp.McpServer`)."""
        if request.method == "POST":
            # Made only for a new session or a sessionless request, not for every POST.
            fresh = partial(
                _HttpServer,
                self._catalog,
                authorize=authorize,
                caller=caller,
                on_behalf_of=on_behalf_of,
            )
            return await self._post(request, owner, fresh)
        if request.method == "DELETE":
            return self._delete(request, owner)
        allow = [("allow", "POST, DELETE")]
        if request.method == "GET":
            message = "this server offers no GET stream; POST one JSON-RPC message"
        else:
            message = f"{request.method} is not allowed on /mcp; POST a JSON-RPC message"
        return HttpResponse(405, HttpResponse.error(405, message).body, headers=allow)

    def _delete(self, request: HttpRequest, owner: str | None) -> HttpResponse:
        session_id = request.header(_SESSION_HEADER)
        if session_id is None:
            return HttpResponse.error(400, "DELETE /mcp needs the Mcp-Session-Id header")
        session = self._sessions.get(session_id)
        if session is None or session.owner != owner:
            return HttpResponse.error(404, "no such MCP session")
        del self._sessions[session_id]
        session.server.features.close()
        return HttpResponse(204)

    async def _post(
        self, request: HttpRequest, owner: str | None, fresh: Callable[[], _HttpServer]
    ) -> HttpResponse:
        """``fresh`` makes the server a new session or a sessionless request runs on."""
        kind = (request.header("content-type") or "").split(";")[0].strip().lower()
        if kind != "application/json":
            return HttpResponse.error(415, "POST /mcp takes Content-Type: application/json")
        try:
            peek = _peek(request.body)
        except UNREADABLE_JSON:
            peek = _Peek()  # not one JSON object: the exchange says exactly why
        now = anyio.current_time()
        session: _Session | None = None
        headers: list[tuple[str, str]] = []
        if peek.method == "initialize":
            opened = self._open(now, owner, fresh())
            if isinstance(opened, HttpResponse):
                return opened
            session, session_id = opened
            headers.append(("mcp-session-id", session_id))
        elif requested_revision(peek.params) == MODERN or peek.method == "server/discover":
            pass  # 2026-07-28: every request stands alone
        elif peek.method is not None or peek.id is not None:
            found = self._find(request, now, owner)
            if isinstance(found, HttpResponse):
                return found
            session = found
        if session is not None and peek.answers:
            return _take_answer(session, peek, request.body)
        if session is not None:
            run: _Run = partial(session.exchange.answer, request.body)
        else:  # a 2026-07-28 request stands alone: one exchange, with its caller's rights
            if peek.method == CANCELLED:
                self._cancel(owner, peek.params)
            run = partial(self._stand_alone, self._exchange(fresh()), peek, owner, request.body)
        if _streams(request, peek, session):
            return _streamed(run, headers, self._owed(session, request))
        answer, invalid = await run()
        if answer is None:
            return HttpResponse(202, headers=headers)
        if invalid:
            return HttpResponse(400, answer, headers=headers)
        owed = self._owed(session, request)
        if owed:
            body = _sse(*owed, answer)
            return HttpResponse(200, body, content_type="text/event-stream", headers=headers)
        return HttpResponse(200, answer, headers=headers)

    async def _stand_alone(
        self,
        exchange: Exchange,
        peek: _Peek,
        owner: str | None,
        body: bytes,
        on_notification: Callable[[bytes], None] | None = None,
    ) -> tuple[bytes | None, bool]:
        """Answer a sessionless request, stoppable by its owner's ``notifications/cancelled``."""
        request_id = peek.id
        if peek.method is None or not _is_id(request_id):
            return await exchange.answer(body, on_notification=on_notification)
        key = (owner, request_id)
        scope = self._in_flight[key] = anyio.CancelScope()
        try:
            with scope:
                return await exchange.answer(body, on_notification=on_notification)
        finally:
            if self._in_flight.get(key) is scope:
                del self._in_flight[key]
        error = {"code": ErrorCode.CANCELLED, "message": "cancelled by the client"}
        return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "error": error}), False

    def _cancel(self, owner: str | None, params: Any) -> None:
        target = params.get("requestId") if isinstance(params, dict) else None
        scope = self._in_flight.get((owner, target)) if _is_id(target) else None
        if scope is not None:
            scope.cancel()

    def _exchange(self, server: _HttpServer) -> Exchange:
        return Exchange(server, config=serve_config(self._catalog), codec=MCP_CODEC)

    def _open(
        self, now: float, owner: str | None, server: _HttpServer
    ) -> tuple[_Session, str] | HttpResponse:
        self._forget_idle(now)
        mine = [key for key, s in self._sessions.items() if s.owner == owner]  # oldest first
        if len(mine) >= self._max_per_owner:
            del self._sessions[mine[0]]  # its own least recently used: no one else's
        elif len(self._sessions) >= self._max_sessions:
            return _rpc_error(
                503,
                ErrorCode.UNAVAILABLE,
                f"too many MCP sessions: {self._max_sessions} are open (max_mcp_sessions); "
                "retry later, or use a 2026-07-28 client, which needs no session",
            )
        session_id = secrets.token_urlsafe(24)
        exchange = self._exchange(server)
        session = _Session(server, exchange, now, self._catalog.version, owner)
        self._sessions[session_id] = session
        return session, session_id

    def _find(self, request: HttpRequest, now: float, owner: str | None) -> _Session | HttpResponse:
        session_id = request.header(_SESSION_HEADER)
        if session_id is None:
            return _rpc_error(
                400,
                ErrorCode.INVALID_REQUEST,
                "Bad Request: send initialize first and then its Mcp-Session-Id header"
                f" (or, in {MODERN}, the revision in params._meta)",
            )
        session = self._sessions.get(session_id)
        if session is not None and session.owner != owner:
            session = None  # another caller's session is, to this one, no session at all
        elif session is not None and now - session.last_used > self._idle:
            del self._sessions[session_id]
            session = None
        if session is None:
            return _rpc_error(
                404, ErrorCode.INVALID_REQUEST, "no such MCP session; initialize again"
            )
        session.last_used = now
        self._sessions.move_to_end(session_id)
        return session

    def _forget_idle(self, now: float) -> None:
        stale = [k for k, s in self._sessions.items() if now - s.last_used > self._idle]
        for key in stale:
            del self._sessions[key]

    def _owed(self, session: _Session | None, request: HttpRequest) -> list[bytes]:
        """The notifications a session's client is owed, sent in front of this answer
        when it accepts ``text/event-stream``: ``tools/list_changed``, then what its
        resources and prompts said since its last request (:mod:`mesh.mcp._features`)."""
        if session is None:
            return []
        owed = [_LIST_CHANGED_FRAME] if self._owes_list_changed(session, request) else []
        pending = session.server.features.pending
        if pending and "text/event-stream" in (request.header("accept") or ""):
            owed.extend(_notification(method, params) for method, params in pending)
            pending.clear()
        return owed

    def _owes_list_changed(self, session: _Session, request: HttpRequest) -> bool:
        version = self._catalog.version
        if version == session.seen_version or not session.server.wants_list_changed:
            return False
        if "text/event-stream" not in (request.header("accept") or ""):
            return False  # it will see the new list when it next asks
        session.seen_version = version
        return True
