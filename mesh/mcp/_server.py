"""Serving the mesh to MCP clients: one :class:`McpServer` per client connection.

It speaks both eras. A handshake-era client sends ``initialize`` (we agree its
revision if we speak it, else offer 2025-11-25), then ``notifications/initialized``;
a 2026-07-28 client sends ``server/discover`` or just its requests, each carrying
its revision in ``params._meta``, and hears of changes on a
``subscriptions/listen`` stream. Either way ``tools/list`` and ``tools/call`` go
to a :class:`~mesh.mcp._catalog.ToolCatalog`, and ``ping`` is answered.

:func:`serve_mcp` runs it over any frame stream (the daemon's ``/mcp`` WebSocket,
which ``mesh mcp`` relays stdio onto, or a test's memory pair) and tells a
handshake-era client ``notifications/tools/list_changed`` whenever agents come or go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mesh._errors import InvalidParams, MeshError, MethodNotFound
from mesh._logging import get_logger
from mesh._orchestrator.access import NOBODY, Principal
from mesh._rpc.caller import ProgressCallback
from mesh._rpc.peer import Peer, RequestContext, open_peer
from mesh._rpc.session import SessionConfig
from mesh._tasks import open_task_group
from mesh._telemetry.metrics import served
from mesh.mcp._asks import ClientSide
from mesh.mcp._catalog import AgentCatalog, Authorize, Catalog
from mesh.mcp._codec import MCP_CODEC, to_wire_id
from mesh.mcp._features import CAPABILITIES, FEATURE_METHODS, Features
from mesh.mcp._revisions import (
    HANDSHAKE_REVISIONS,
    IMPLEMENTATION,
    LATEST_HANDSHAKE,
    MODERN,
    SERVER_INFO_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
    requested_revision,
)
from transports import FrameStream

__all__ = ["INSTRUCTIONS", "McpServer", "serve_config", "serve_mcp"]

log = get_logger("mesh.mcp")

INSTRUCTIONS: Final = (
    "These tools belong to the agents of an agent-mesh. A tool named `AGENT__TOOL` is"
    " tool TOOL of agent AGENT; the list changes as agents come and go."
)
_CAPABILITIES: Final = {"tools": {"listChanged": True}, **CAPABILITIES}
#: 2026-07-28 results say they are complete and how long a client may cache them
#: (0: the set of agents can change at any moment).
_MODERN_RESULT: Final = {"resultType": "complete"}
_MODERN_LIST: Final = {"resultType": "complete", "cacheScope": "private", "ttlMs": 0}
_LIST_CHANGED: Final = "notifications/tools/list_changed"
#: MCP tool names are 1-128 characters; a longer one names no tool.
MAX_TOOL_NAME: Final = 128
_PROGRESS: Final = "notifications/progress"


def _instructions(catalog: Catalog) -> str:
    if isinstance(catalog, AgentCatalog):
        return (
            f"These tools belong to agent {catalog.agent!r} of an agent-mesh, under its own"
            " names; the list changes as the agent's tools do."
        )
    return INSTRUCTIONS


def _unsupported(requested: Any) -> MeshError:
    return MeshError(
        f"unsupported protocol version {requested!r}; this server speaks {MODERN} per request"
        f" and {', '.join(HANDSHAKE_REVISIONS)} by initialize",
        code=UNSUPPORTED_PROTOCOL_VERSION,
        data={"supported": [MODERN], "requested": requested},
    )


class McpServer:
    """The MCP server side of one client connection (a :class:`~mesh.RequestHandler`)."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        authorize: Authorize | None = None,
        caller: Any = None,
        on_behalf_of: Principal = NOBODY,
    ) -> None:
        self.catalog = catalog
        self.instructions = _instructions(catalog)
        #: Who agents' tools are called for, at the orchestrator's door.
        self.on_behalf_of = on_behalf_of
        #: Who this client is allowed to call (None: everything); see :data:`Authorize`.
        self.authorize = authorize
        #: Who the client is, for the extra tools (opaque here).
        self.caller = caller
        #: The handshake-era revision agreed by ``initialize`` (None: none yet).
        self.revision: str | None = None
        #: What the client declared and the log level it set: where agents' logs and asks go.
        self.client = ClientSide()
        self.initialized = False
        #: Resources, prompts, completion and the log level, for this client.
        self.features = Features(
            catalog.orchestrator,
            catalog.agent if isinstance(catalog, AgentCatalog) else None,
            on_behalf_of,
        )
        self.features.wants_list_changed = lambda: self.wants_list_changed

    @property
    def log_level(self) -> str | None:
        """The level the client set with ``logging/setLevel`` (None: it set none): log
        notifications below it are not for this client."""
        return self.client.level

    @property
    def wants_list_changed(self) -> bool:
        """Handshake-era clients hear of changes unasked, once initialized."""
        return self.initialized and self.revision is not None

    def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        requested = requested_revision(params)
        if requested is not None and requested != MODERN:
            raise _unsupported(requested)
        modern = requested is not None
        if method == "initialize":
            return self._initialize(params)
        if method == "server/discover":
            return self._discover()
        if method == "ping":
            return dict(_MODERN_RESULT) if modern else {}
        if method == "tools/list":
            return self._list(modern)
        if method == "tools/call":
            return self._call(ctx, params, modern)
        if method == "logging/setLevel":
            return self.client.set_level(params)
        if method == "subscriptions/listen" and modern:
            return self._listen(ctx, params)
        if method in FEATURE_METHODS:
            return self._feature(ctx, method, params, modern)
        raise MethodNotFound(f"the mesh's MCP server does not serve {method!r}")

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        if method == "notifications/initialized":
            self.initialized = True

    # -- methods ---------------------------------------------------------------------------

    def _initialize(self, params: Any) -> dict[str, Any]:
        offered = params.get("protocolVersion") if isinstance(params, dict) else None
        self.revision = offered if offered in HANDSHAKE_REVISIONS else LATEST_HANDSHAKE
        self.client.initialized(params)
        return {
            "protocolVersion": self.revision,
            "capabilities": _CAPABILITIES,
            "serverInfo": IMPLEMENTATION,
            "instructions": self.instructions,
        }

    def _discover(self) -> dict[str, Any]:
        return {
            "supportedVersions": [MODERN],
            "capabilities": _CAPABILITIES,
            "instructions": self.instructions,
            "_meta": {SERVER_INFO_KEY: IMPLEMENTATION},
            **_MODERN_LIST,
        }

    async def _list(self, modern: bool) -> dict[str, Any]:
        answer: dict[str, Any] = {"tools": await self.catalog.list_tools(authorize=self.authorize)}
        if modern:
            answer.update(_MODERN_LIST)
        return answer

    async def _call(self, ctx: RequestContext, params: Any, modern: bool) -> dict[str, Any]:
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidParams("tools/call needs the tool's `name` - at `$.params.name`")
        if len(name) > MAX_TOOL_NAME:
            # Never echo a client's whole string back: an error names it in part.
            raise InvalidParams(
                f"unknown tool {name[:64]!r}... ({len(name)} characters; a tool name has at "
                f"most {MAX_TOOL_NAME}) - at `$.params.name`"
            )
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise InvalidParams("tool arguments must be an object - at `$.params.arguments`")
        progress = _progress(ctx, params)
        with served("mcp", "tools/call"):
            answer = await self.catalog.call_tool(
                name,
                arguments,
                on_progress=progress,
                authorize=self.authorize,
                caller=self.caller,
                on_behalf_of=self.on_behalf_of,
                **self.client.handlers(ctx),
            )
        if answer is None:
            raise InvalidParams(f"unknown tool {name!r}; tools/list names them all")
        if modern:
            answer.update(_MODERN_RESULT)
        return answer

    async def _feature(
        self, ctx: RequestContext, method: str, params: Any, modern: bool
    ) -> dict[str, Any]:
        with served("mcp", method):
            answer = await self.features.handle(ctx, method, params)
        if modern:
            answer.update(_MODERN_LIST if method.endswith("/list") else _MODERN_RESULT)
        return answer

    async def _listen(self, ctx: RequestContext, params: Any) -> dict[str, Any]:
        """A 2026-07-28 change stream: acknowledge, then one notification per change."""
        wanted = params.get("notifications") if isinstance(params, dict) else None
        tools = isinstance(wanted, dict) and wanted.get("toolsListChanged") is True
        meta = {"io.modelcontextprotocol/subscriptionId": to_wire_id(ctx.request_id)}

        def notify(method: str, params: Any) -> None:
            ctx.notify_nowait(method, {**(params or {}), "_meta": meta})

        honored, stop = await self.features.listen(wanted, notify)
        if tools:
            honored["toolsListChanged"] = True
        ctx.notify_nowait(
            "notifications/subscriptions/acknowledged", {"notifications": honored, "_meta": meta}
        )
        try:
            version = self.catalog.version
            while True:  # until the client cancels (or the link ends)
                version = await self.catalog.wait_changed(version)
                if tools:
                    ctx.notify_nowait(_LIST_CHANGED, {"_meta": meta})
        finally:
            stop()


def _progress(ctx: RequestContext, params: dict[str, Any]) -> ProgressCallback | None:
    """Relays an agent's progress to the client, under the token the client chose."""
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    if not isinstance(token, int | str):
        return None  # the client asked for none

    def relay(update: Mapping[str, Any]) -> None:
        params = {"progressToken": token, "progress": update.get("progress", 0)}
        params.update((k, update[k]) for k in ("total", "message") if update.get(k) is not None)
        ctx.notify_nowait(_PROGRESS, params)

    return relay


#: An MCP client's requests served at once on one link (a subscription holds its own
#: until the client leaves): clients keep a few in flight.
MCP_REQUESTS_IN_PROGRESS: Final = 128


def serve_config(catalog: Catalog) -> SessionConfig:
    """An MCP client link: no mesh heartbeats (MCP's liveness is the client's business),
    answers as large as the agents' results need (:meth:`ToolCatalog.answer_limit`), and
    at most :data:`MCP_REQUESTS_IN_PROGRESS` requests at once; what the client sends is
    bounded by its transport."""
    return SessionConfig(
        heartbeat_interval=None,
        max_frame_size=catalog.answer_limit(),
        max_requests_in_progress=MCP_REQUESTS_IN_PROGRESS,
    )


async def serve_mcp(
    stream: FrameStream,
    catalog: Catalog,
    *,
    authorize: Authorize | None = None,
    caller: Any = None,
    on_behalf_of: Principal = NOBODY,
    config: SessionConfig | None = None,
) -> None:
    """Serve the mesh's tools to the MCP client on ``stream`` until it leaves.

    Agents' tools are called ``on_behalf_of`` (the orchestrator's door checks it)."""
    server = McpServer(catalog, authorize=authorize, caller=caller, on_behalf_of=on_behalf_of)
    config = config or serve_config(catalog)
    async with (
        open_peer(stream, handler=server, config=config, codec=MCP_CODEC) as peer,
        open_task_group() as tg,
    ):
        server.features.notify = peer.notify_nowait
        try:
            tg.start_soon(_tell_changes, server, peer)
            await peer.wait_closed()
            tg.cancel_scope.cancel()
        finally:
            server.features.close()


async def _tell_changes(server: McpServer, peer: Peer) -> None:
    version = server.catalog.version
    while not peer.closed:
        version = await server.catalog.wait_changed(version)
        if server.wants_list_changed and not peer.closed:
            peer.notify_nowait(_LIST_CHANGED)
