"""The daemon's MCP face: ``/mcp`` over HTTP, and over WebSocket for ``mesh mcp``.

Every agent's tools (see :class:`~mesh.mcp.ToolCatalog`), plus three room tools:
``mesh_start_room`` (the body of ``POST /rooms``), ``mesh_room_transcript`` and
``mesh_list_rooms``. ``mesh mcp`` relays an MCP host's stdio onto the WebSocket
``/mcp``, where a link is a stream: changes arrive as they happen.

Both routes need the ``call`` right, and an MCP client gets exactly what its
token gets from the rest of the API: it sees and calls only the agents whose
access section admits it (the orchestrator's door, on behalf of the token, as
for ``POST /rpc``), and the room tools are
the room routes themselves, answered as tools, with their rights, bounds and
ownership. An HTTP session belongs to the token that opened it.

A browser's request to ``/mcp`` must come from the daemon's own origin (MCP's
rule against DNS rebinding): an ``Origin`` header whose host and port are not the
ones the request was sent to, or whose host is a name other than ``localhost``
and the daemon's ``host`` setting (a rebound name), is refused with 403.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

import msgspec

from mesh._errors import Forbidden, InvalidParams, ToolError
from mesh.daemon._auth import Identity, Right
from mesh.daemon._routes import HttpHandler, Params
from mesh.mcp import ExtraTool, ToolCatalog, serve_mcp
from mesh.mcp._catalog import Authorize, McpMesh
from mesh.mcp._http_server import McpHttpEndpoint
from mesh.rooms import RoomSpec
from transports import CloseCode, HttpRequest, HttpResponse, WebSocketStream

__all__ = ["DaemonMcp", "room_tools"]

#: What each room tool is, as a room route: the route's handler name and its right.
_ROOM_TOOLS: Final = {
    "mesh_start_room": ("create_room", Right.ROOMS),
    "mesh_room_transcript": ("room", Right.READ),
    "mesh_list_rooms": ("rooms", Right.READ),
}


def _schema(tp: Any) -> dict[str, Any]:
    """A self-contained object schema: the top-level ``$ref`` inlined, ``$defs`` kept."""
    schema = msgspec.json.schema(tp)
    ref = schema.get("$ref")
    defs: dict[str, Any] = schema.get("$defs", {})
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        top = dict(defs.pop(ref.removeprefix("#/$defs/")))
        if defs:
            top["$defs"] = defs
        return top
    return schema


async def _as_tool(
    handler: HttpHandler, who: Identity, body: bytes, params: Params, target: str = "/mcp"
) -> Any:
    """A room route's answer as a tool's: its JSON on success, its message as the error."""
    response = await handler(HttpRequest("POST", target, (), body), who, params)
    answer = msgspec.json.decode(response.body) if response.body else None
    if response.status >= 400:
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        raise ToolError(str(error.get("message") or f"HTTP {response.status}"))
    return answer


def room_tools(handlers: dict[str, HttpHandler]) -> list[ExtraTool]:
    """Starting a room and reading it, as tools; ``handlers`` are the room routes'."""

    async def start(arguments: dict[str, Any], who: Identity) -> Any:
        return await _as_tool(handlers["create_room"], who, msgspec.json.encode(arguments), {})

    async def transcript(arguments: dict[str, Any], who: Identity) -> Any:
        room_id = arguments.get("room_id")
        if not isinstance(room_id, str) or not room_id:
            raise InvalidParams("`room_id` must be a room's id - at `$.params.arguments.room_id`")
        return await _as_tool(handlers["room"], who, b"", {"id": room_id})

    async def listing(arguments: dict[str, Any], who: Identity) -> Any:
        # The same page as GET /rooms?limit=&before= (the route checks both).
        page = {k: str(arguments[k]) for k in ("limit", "before") if arguments.get(k) is not None}
        return await _as_tool(handlers["rooms"], who, b"", {}, f"/mcp?{urlencode(page)}")

    by_id = {
        "type": "object",
        "properties": {"room_id": {"type": "string", "description": "the room's id"}},
        "required": ["room_id"],
    }
    return [
        ExtraTool(
            "mesh_start_room",
            "Start a conversation room: agents take turns on a topic (members are agent ids).",
            _schema(RoomSpec),
            start,
        ),
        ExtraTool(
            "mesh_room_transcript",
            "A room's status and its messages so far, in turn order.",
            by_id,
            transcript,
        ),
        ExtraTool(
            "mesh_list_rooms",
            "The rooms and their status, newest first, a page at a time: `next` is the "
            "`before` of the page of older ones (null on the last page).",
            {
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                    "before": {"type": "string", "description": "a page's `next`"},
                },
            },
            listing,
        ),
    ]


class DaemonMcp:
    """The handlers of ``/mcp`` (HTTP and WebSocket); follows the registry from the start."""

    def __init__(
        self,
        orchestrator: McpMesh,
        room_handlers: dict[str, HttpHandler],
        *,
        max_sessions: int = 256,
        max_sessions_per_owner: int = 16,
        host: str = "127.0.0.1",
    ) -> None:
        self._host = host
        self.catalog = ToolCatalog(orchestrator, extra=room_tools(room_handlers))
        self.catalog.attach()
        self.http = McpHttpEndpoint(
            self.catalog, max_sessions=max_sessions, max_sessions_per_owner=max_sessions_per_owner
        )
        self._limits = (max_sessions, max_sessions_per_owner)
        #: Each agent's own server (``/mcp/{agent}``), made when first asked for; only
        #: for agents the registry holds, so the map is bounded by it.
        self._own: dict[str, McpHttpEndpoint] = {}
        self._mesh = orchestrator

    def _endpoint(self, params: Params) -> McpHttpEndpoint | HttpResponse:
        """``/mcp``'s endpoint, or ``/mcp/{agent}``'s (404 for an agent nobody knows)."""
        agent = params.get("agent")
        if agent is None:
            return self.http
        endpoint = self._own.get(agent)
        if endpoint is None:
            if agent not in self._mesh.registry:
                return HttpResponse.error(
                    404, f"no agent {agent[:100]!r} to serve over MCP; GET /agents lists them"
                )
            # Forget the servers of agents gone from the registry: the map stays bounded
            # by it however many agents come and go (their sessions go with them).
            for gone in [a for a in self._own if a not in self._mesh.registry]:
                del self._own[gone]
            sessions, per_owner = self._limits
            endpoint = self._own[agent] = McpHttpEndpoint(
                self.catalog.agent_catalog(agent),
                max_sessions=sessions,
                max_sessions_per_owner=per_owner,
            )
        return endpoint

    def authorize(self, who: Identity) -> Authorize:
        """What ``who`` may call: agents by their access sections, room tools by right."""

        def authorize(agent: str | None, tool: str) -> None:
            if agent is not None:
                # Only to leave out of tools/list what the door would refuse.
                self._mesh.authorize(agent, "tools/call", on_behalf_of=who.principal)
                return
            right = _ROOM_TOOLS.get(tool, (None, Right.ADMIN))[1]
            if not who.may(right):
                raise Forbidden(f"tool {tool!r} needs the {right} right, which this token lacks")

        return authorize

    def _foreign_origin(self, request: HttpRequest) -> str | None:
        """Why ``request`` may not reach /mcp (a browser page of another origin), or None."""
        origin = request.header("origin")
        if origin is None or own_origin(origin, request.header("host"), self._host):
            return None
        return (
            f"/mcp refuses requests from another origin ({origin[:100]!r}): a page may "
            "call it only from the daemon's own address (docs/mcp.md#security)"
        )

    def refuse_stream_origin(self, route: Any, request: HttpRequest) -> str | None:
        """For the WebSocket ``/mcp``: the same Origin rule (other routes: no rule)."""
        if route.name != "mcp_stream" or self._foreign_origin(request) is None:
            return None
        return "/mcp takes pages from the daemon's own origin only"  # a close reason: short

    async def handle_http(
        self, request: HttpRequest, who: Identity, params: Params
    ) -> HttpResponse:
        refused = self._foreign_origin(request)
        if refused is not None:
            return HttpResponse.error(403, refused)
        endpoint = self._endpoint(params)
        if isinstance(endpoint, HttpResponse):
            return endpoint
        return await endpoint.handle(
            request,
            owner=who.owner,
            authorize=self.authorize(who),
            caller=who,
            on_behalf_of=who.principal,
        )

    async def serve_stream(self, stream: WebSocketStream, who: Identity, params: Params) -> None:
        agent = params.get("agent")
        if agent is not None and agent not in self._mesh.registry:
            await stream.aclose(CloseCode.NOT_FOUND, f"no agent {agent[:60]!r} to serve over MCP")
            return
        catalog = self.catalog if agent is None else self.catalog.agent_catalog(agent)
        await serve_mcp(
            stream,
            catalog,
            authorize=self.authorize(who),
            caller=who,
            on_behalf_of=who.principal,
        )


def own_origin(origin: str, host_header: str | None, daemon_host: str) -> bool:
    """Whether a browser's ``Origin`` is the daemon itself, under a name no one can rebind."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or host_header is None:
        return False
    if parts.netloc.lower() != host_header.lower():
        return False  # a page of another site
    name = (parts.hostname or "").lower()
    if name in ("localhost", daemon_host.lower()):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False  # a DNS name the daemon was not told of: it may be rebound
    return True
