"""The daemon's route table, and the one place every request is authenticated.

Every route the daemon serves is a row of :data:`ROUTES`: its method (``WS``
for a WebSocket upgrade), its path, the :class:`~mesh.daemon._auth.Right` it
needs, and its handler's name. :class:`RouteTable` checks the token before it
even looks for a route (so a stranger learns nothing, not even which paths
exist), then the right, then calls the handler; a route without a handler, or
a handler without a route, stops the daemon at start. A test walks this table
and expects 401 on every row but the public ones (``GET /health``, the probes, the page).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Final, TypeVar
from urllib.parse import unquote

import anyio.abc
import msgspec

from mesh._input import UNREADABLE_JSON, why_unreadable
from mesh._logging import get_logger
from mesh.daemon._auth import Identities, Identity, Right, forbidden, refusal, websocket_refusal
from mesh.daemon._tokens import Role
from mesh.mcp._http_server import jsonrpc_refusal
from transports import (
    CloseCode,
    HttpRequest,
    HttpResponse,
    WebSocketConfig,
    WebSocketStream,
    websocket_upgrade_handler,
)
from transports._sockets import adopts_io

__all__ = [
    "ROUTES",
    "BadBody",
    "HttpHandler",
    "Route",
    "RouteTable",
    "WebSocketHandler",
    "read_body",
]

log = get_logger("mesh.daemon")

Params = Mapping[str, str]
_Body = TypeVar("_Body")
HttpHandler = Callable[[HttpRequest, Identity, Params], Awaitable[HttpResponse]]
WebSocketHandler = Callable[[WebSocketStream, Identity, Params], Awaitable[None]]


class BadBody(ValueError):
    """A request body its route cannot read (the text says why): the table answers 400."""


def read_body(request: HttpRequest, kind: type[_Body], what: str) -> _Body:
    """``request``'s JSON body as ``kind``; :class:`BadBody` names what is wrong.

    Every route reads its body here, so none can answer malformed input with a 500:
    msgspec raises Python's own errors for a string that is not UTF-8 and for nesting
    past its depth, besides its ``DecodeError``.
    """
    try:
        return msgspec.json.decode(request.body, type=kind)
    except UNREADABLE_JSON as exc:
        raise BadBody(f"invalid {what}: {why_unreadable(exc)}") from None


@dataclass(frozen=True, slots=True)
class Route:
    method: str  # GET, POST, DELETE, or WS for a WebSocket upgrade
    path: str  # segments in braces are parameters: /agents/{id}
    right: Right
    name: str  # the handler's key
    segments: tuple[str, ...] = field(init=False)
    #: How many segments are fixed: /agents/events beats /agents/{id}.
    literal: int = field(init=False)

    def __post_init__(self) -> None:
        segments = tuple(p for p in self.path.split("/") if p)
        object.__setattr__(self, "segments", segments)
        object.__setattr__(self, "literal", sum(not s.startswith("{") for s in segments))

    def match(self, parts: tuple[str, ...]) -> dict[str, str] | None:
        segments = self.segments
        if len(segments) != len(parts):
            return None
        params: dict[str, str] = {}
        for segment, part in zip(segments, parts, strict=True):
            if segment[0] == "{":
                params[segment[1:-1]] = part
            elif segment != part:
                return None
        return params


ROUTES: Final = (
    Route("GET", "/health", Right.PUBLIC, "health"),
    # Probes for orchestrators and load balancers: public, and they say only ok or why not.
    Route("GET", "/healthz", Right.PUBLIC, "healthz"),
    Route("GET", "/readyz", Right.PUBLIC, "readyz"),
    # Prometheus: an observer token reads it (docs/observability.md).
    Route("GET", "/metrics", Right.READ, "metrics"),
    Route("GET", "/agents", Right.READ, "agents"),
    Route("WS", "/agents/events", Right.READ, "watch_agents"),
    Route("POST", "/agents/register", Right.REGISTER, "register"),
    Route("GET", "/agents/{id}", Right.READ, "agent"),
    Route("DELETE", "/agents/{id}", Right.REGISTER, "deregister"),
    Route("POST", "/agents/{id}/heartbeat", Right.REGISTER, "heartbeat"),
    Route("POST", "/rpc", Right.CALL, "rpc"),
    Route("POST", "/broadcast", Right.CALL, "broadcast"),
    Route("POST", "/rooms", Right.ROOMS, "create_room"),
    Route("GET", "/rooms", Right.READ, "rooms"),
    Route("GET", "/rooms/{id}", Right.READ, "room"),
    Route("DELETE", "/rooms/{id}", Right.ROOMS, "delete_room"),
    Route("GET", "/rooms/{id}/events", Right.READ, "room_events"),
    Route("WS", "/rooms/{id}/events", Right.READ, "observe_room"),
    Route("POST", "/rooms/{id}/pause", Right.ROOMS, "pause_room"),
    Route("POST", "/rooms/{id}/resume", Right.ROOMS, "resume_room"),
    Route("POST", "/rooms/{id}/stop", Right.ROOMS, "stop_room"),
    Route("POST", "/rooms/{id}/join", Right.ROOMS, "join_room"),
    Route("POST", "/rooms/{id}/leave", Right.ROOMS, "leave_room"),
    Route("POST", "/rooms/{id}/say", Right.ROOMS, "say_in_room"),
    Route("POST", "/rooms/{id}/answer", Right.ROOMS, "answer_in_room"),
    # The room page: files with no data in them (everything it shows comes with a token).
    Route("GET", "/", Right.PUBLIC, "page"),
    Route("GET", "/static/{name}", Right.PUBLIC, "page_file"),
    # Who the presented token is (its name and role): the page shows it.
    Route("GET", "/whoami", Right.READ, "whoami"),
    Route("GET", "/tokens", Right.ADMIN, "tokens"),
    Route("POST", "/tokens", Right.ADMIN, "create_token"),
    Route("DELETE", "/tokens/{id}", Right.ADMIN, "revoke_token"),
    Route("WS", "/ws", Right.DIAL, "dial_in"),
    # MCP (docs/mcp.md): one JSON-RPC message per POST, DELETE ends a session; the
    # WebSocket is the same server as a stream, for `mesh mcp`. GET is 405.
    Route("POST", "/mcp", Right.CALL, "mcp"),
    Route("DELETE", "/mcp", Right.CALL, "mcp"),
    Route("WS", "/mcp", Right.CALL, "mcp_stream"),
    # One agent as an MCP server of its own: its tools under their own names.
    Route("POST", "/mcp/{agent}", Right.CALL, "mcp"),
    Route("DELETE", "/mcp/{agent}", Right.CALL, "mcp"),
    Route("WS", "/mcp/{agent}", Right.CALL, "mcp_stream"),
    # A2A (docs/a2a.md): each agent's card, and its JSON-RPC endpoint (SSE for streams).
    Route("GET", "/a2a/{agent}/.well-known/agent-card.json", Right.READ, "a2a_card"),
    Route("POST", "/a2a/{agent}", Right.CALL, "a2a"),
    # ...and its HTTP+JSON binding under the same base: the same methods, so the same right
    # (CALL) on every verb. `{task}` may end `:cancel` or `:subscribe` (POST).
    Route("POST", "/a2a/{agent}/message:send", Right.CALL, "a2a_rest"),
    Route("POST", "/a2a/{agent}/message:stream", Right.CALL, "a2a_rest"),
    Route("GET", "/a2a/{agent}/tasks", Right.CALL, "a2a_rest"),
    Route("GET", "/a2a/{agent}/tasks/{task}", Right.CALL, "a2a_rest"),
    Route("POST", "/a2a/{agent}/tasks/{task}", Right.CALL, "a2a_rest"),
    Route("GET", "/a2a/{agent}/tasks/{task}/pushNotificationConfigs", Right.CALL, "a2a_rest"),
    Route("POST", "/a2a/{agent}/tasks/{task}/pushNotificationConfigs", Right.CALL, "a2a_rest"),
    Route(
        "GET", "/a2a/{agent}/tasks/{task}/pushNotificationConfigs/{config}", Right.CALL, "a2a_rest"
    ),
    Route(
        "DELETE",
        "/a2a/{agent}/tasks/{task}/pushNotificationConfigs/{config}",
        Right.CALL,
        "a2a_rest",
    ),
    Route("GET", "/a2a/{agent}/extendedAgentCard", Right.CALL, "a2a_rest"),
)


def _by_literal_path(routes: tuple[Route, ...]) -> dict[tuple[str, ...], list[Route]]:
    found: dict[tuple[str, ...], list[Route]] = {}
    for route in routes:
        if route.literal == len(route.segments):
            found.setdefault(route.segments, []).append(route)
    return found


def _by_first(routes: tuple[Route, ...]) -> dict[tuple[int, str], tuple[Route, ...]]:
    """Routes by (how many segments, the first one)."""
    found: dict[tuple[int, str], list[Route]] = {}
    for route in routes:
        if not route.segments:
            continue
        if route.segments[0].startswith("{"):
            raise ValueError(f"a route begins with a literal segment: {route.path}")
        found.setdefault((len(route.segments), route.segments[0]), []).append(route)
    return {key: tuple(bucket) for key, bucket in found.items()}


#: The routes without parameters, by path: a request for one of these paths needs no
#: scan (no route can match it with more literal segments); the others are tried only
#: against routes of as many segments that begin the same way. /rpc, /mcp and
#: /a2a/{agent} are asked on every call.
_LITERAL: Final = _by_literal_path(ROUTES)
_BY_FIRST: Final = _by_first(ROUTES)


def resolve(method: str, path: str) -> tuple[Route, dict[str, str]] | HttpResponse:
    """The route for ``method path``, or the 404 / 405 / 426 that says why none."""
    # Each segment is percent-decoded after the split: `a%2Fb` is one id, not two.
    parts = tuple(unquote(p) for p in path.split("/") if p)
    literal = _LITERAL.get(parts)
    if literal is not None:
        matches: list[tuple[Route, dict[str, str]]] = [(r, {}) for r in literal]
    else:
        candidates = _BY_FIRST.get((len(parts), parts[0]), ()) if parts else ()
        matches = [(r, params) for r in candidates if (params := r.match(parts)) is not None]
        if not matches:
            return refusal(404, f"no route {method} {path}")
        best = max(r.literal for r, _ in matches)
        matches = [(r, params) for r, params in matches if r.literal == best]
    for route, params in matches:
        if route.method == method:
            return route, params
    methods = sorted({r.method for r, _ in matches})
    if methods == ["WS"]:
        return refusal(426, f"{path} is a WebSocket: send an upgrade request")
    return refusal(405, f"{method} is not allowed on {path} (allowed: {', '.join(methods)})")


class RouteTable:
    """Authenticates, authorizes and routes every HTTP request and WebSocket upgrade."""

    def __init__(
        self,
        identities: Identities,
        http: Mapping[str, HttpHandler],
        websocket: Mapping[str, WebSocketHandler],
        ws_config: WebSocketConfig | None = None,
        refuse_origin: Callable[[Route, HttpRequest], str | None] | None = None,
    ) -> None:
        wanted = {r.name for r in ROUTES}
        given = set(http) | set(websocket)
        if wanted != given:
            raise RuntimeError(
                f"route table and handlers disagree: no handler for {sorted(wanted - given)}, "
                f"no route for {sorted(given - wanted)}"
            )
        self.identities = identities
        self.ws_config = ws_config
        #: Why a WebSocket upgrade's Origin may not open this route (None: it may).
        self.refuse_origin = refuse_origin
        self._http = dict(http)
        self._websocket = dict(websocket)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        found = resolve(request.method, request.path)
        if not isinstance(found, HttpResponse) and found[0].right is Right.PUBLIC:
            # /health and the page's files: a stranger learns only that they exist.
            return await self._http[found[0].name](request, _NOBODY, found[1])
        checked = self.identities.check(request, Right.PUBLIC)
        if isinstance(checked, HttpResponse):
            return _refused(request, checked)
        if isinstance(found, HttpResponse):
            return found
        route, params = found
        if not checked.may(route.right):
            return _refused(request, forbidden(checked, route.right))
        try:
            return await self._http[route.name](request, checked, params)
        except BadBody as exc:
            return HttpResponse.error(400, str(exc))

    @adopts_io  # every way below is a websocket_upgrade_handler, which takes the I/O over
    async def upgrade(
        self, stream: anyio.abc.ByteStream, request: HttpRequest, trailing: bytes
    ) -> None:
        found = resolve("WS", request.path)
        handler: Callable[[WebSocketStream, str | None], Awaitable[None]]
        if isinstance(found, HttpResponse):
            handler = _reject_later  # websocket_upgrade_handler answers 404 (paths=())
            paths: tuple[str, ...] | None = ()
        else:
            route, params = found
            identity = self.identities.identify(request, websocket=True)
            claimed = request.header("x-agent-id") or request.query_value("agent")
            if identity is None or not identity.may(route.right):
                code, reason = websocket_refusal(identity, route.right)
                log.info("websocket.unauthorized", client=request.client, path=request.path)
                handler = partial(_close, code, reason)
            elif self.refuse_origin and (why := self.refuse_origin(route, request)) is not None:
                handler = partial(_close, CloseCode.FORBIDDEN, why)
            elif route.right is Right.DIAL and claimed is not None and claimed != identity.agent:
                log.warning("websocket.impersonation", client=request.client, claimed=claimed)
                reason = f"token does not belong to agent {claimed[:64]!r}"
                handler = partial(_close, CloseCode.FORBIDDEN, reason)
            else:
                handler = partial(self._serve, route, identity, params)
            paths = None
        upgrade = websocket_upgrade_handler(
            handler, authenticator=None, paths=paths, config=self.ws_config
        )
        await upgrade(stream, request, trailing)

    async def _serve(
        self,
        route: Route,
        identity: Identity,
        params: Params,
        stream: WebSocketStream,
        _: str | None,
    ) -> None:
        with self.identities.track(identity, stream) as room:
            if not room:
                limit = self.identities.max_streams
                reason = f"this token has {limit} streams open (max_streams_per_identity)"
                log.info("websocket.too_many", identity=identity.name, limit=limit)
                await stream.aclose(CloseCode.TOO_MANY, reason)
                return
            await self._websocket[route.name](stream, identity, params)


#: Stands in for the caller of the one public route.
_NOBODY: Final = Identity(role=Role.OBSERVER, name="")


async def _close(code: int, reason: str, stream: WebSocketStream, _: str | None) -> None:
    await stream.aclose(code, reason)


async def _reject_later(stream: WebSocketStream, _: str | None) -> None:
    """Never called: with no allowed path the upgrade is answered with 404."""


def _refused(request: HttpRequest, refusal: HttpResponse) -> HttpResponse:
    """An MCP client shows only a JSON-RPC error's words: ``/mcp`` refuses in those."""
    mcp = request.path == "/mcp" or request.path.startswith("/mcp/")
    return jsonrpc_refusal(request, refusal) if mcp else refusal
