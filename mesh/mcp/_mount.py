"""Mounting an MCP server as a mesh agent.

:func:`mcp_connector` turns a connector to an MCP server (a stdio child, or a
streamable HTTP endpoint) into a connector the orchestrator can use like any
other: each connection negotiates a revision, lists the server's tools, and hands
the orchestrator one end of an in-memory link whose other end is served by a
:class:`McpMount`. The mount answers the mesh's methods by calling the server over
an MCP :class:`~mesh.Peer` (the MCP codec on the same session machinery), so
deadlines, cancels, progress, liveness, reconnect, the registry, broadcast and
routing work for the server as for any agent.

What the mesh asks and what the MCP server is asked:

==================  ======================================================================
``agent/info``      the server's name, version and instructions from the handshake
``ping``            ``ping`` (any answer is alive: a 2026-07-28 server answers "not found")
``tools/list``      ``tools/list``, cached and refreshed on ``list_changed``
``tools/call``      ``tools/call``; the one text, or ``structuredContent`` beside at most
                    one text; else the items as mesh content (:mod:`mesh.content`,
                    ``{"$content": [...], "$structured": ...}``) unchanged;
                    ``isError`` raises :class:`~mesh.ToolError`
anything else       passed through as is (``resources/read``, ``prompts/get``, ...)
==================  ======================================================================
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio

from mesh._errors import (
    CallTimeout,
    ConnectionLost,
    MeshError,
    MethodNotFound,
    ProtocolError,
    RemoteError,
    ToolError,
)
from mesh._logging import get_logger
from mesh._orchestrator.router import AGENT_NOTICES, TOOLS_CHANGED
from mesh._rpc.peer import Peer, RequestContext
from mesh.content import CONTENT_KEY, STRUCTURED_KEY
from mesh.mcp._asks import ASKABLE, ASKED, CallsInFlight
from mesh.mcp._revisions import (
    HANDSHAKE_REVISIONS,
    IMPLEMENTATION,
    LATEST_HANDSHAKE,
    MODERN,
    envelope,
)

__all__ = ["REVISION_CHOICES", "McpMount", "Revision", "tool_result"]

log = get_logger("mesh.mcp")

Revision = Literal["auto", "2026-07-28", "2025-11-25", "2025-06-18"]
REVISION_CHOICES: Final = ("auto", MODERN, "2025-11-25", "2025-06-18")

#: Methods of the mesh's own that never reach an MCP server.
_MESH_ONLY: Final = frozenset({"agent/info", "mesh/call"})


@dataclass(slots=True)
class _Negotiated:
    revision: str
    server_info: dict[str, Any]
    capabilities: dict[str, Any]
    instructions: str


def tool_result(name: str, result: Any) -> Any:
    """An MCP ``CallToolResult`` as the mesh's result, or the :class:`ToolError` it reports."""
    if not isinstance(result, dict):
        raise ProtocolError(f"tool {name!r} answered with a {type(result).__name__}, not an object")
    result_type = result.get("resultType", "complete")
    if result_type != "complete":
        raise ToolError(
            f"tool {name!r} asked for more input (resultType {result_type!r}),"
            " which the mesh does not bridge"
        )
    content = result.get("content")
    content = content if isinstance(content, list) else []
    if result.get("isError"):
        raise ToolError(_text_of(content) or f"tool {name!r} reported an error", data=result)
    texts_only = all(isinstance(c, dict) and c.get("type") == "text" for c in content)
    if texts_only and len(content) <= 1:
        # The plain value, as a mesh tool returns it (a text beside structured data is,
        # by MCP's convention, that data serialized).
        if "structuredContent" in result:
            return result["structuredContent"]
        if content:
            return content[0].get("text", "")
    # Images, audio, resources, links, several items: MCP's items are the mesh's content
    # items, so they pass as they came, for the caller (or /mcp's client) to read as such.
    answer: dict[str, Any] = {CONTENT_KEY: content}
    if result.get("structuredContent") is not None:
        answer[STRUCTURED_KEY] = result["structuredContent"]
    return answer


def _text_of(content: list[Any]) -> str:
    texts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
    return "\n".join(t for t in texts if isinstance(t, str))


class _ServerRequests:
    """What we answer when the MCP server asks us something (the client's side)."""

    def __init__(self, mount: McpMount) -> None:
        self._mount = mount

    def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        if method == "ping":
            return {}
        if method == "roots/list":
            return {"roots": []}
        kind = ASKED.get(method)
        if kind is not None:  # to whoever called the tool that asks
            return self._mount.calls.forward(kind, method, params)
        raise MethodNotFound(f"the mesh does not bridge {method!r} from MCP servers")

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> Any:
        if method == "notifications/tools/list_changed":
            return self._mount.tools_changed()
        notice = method.removeprefix("notifications/")
        if notice in AGENT_NOTICES:
            return self._mount.tell_mesh(notice, params)
        if method == "notifications/message" and isinstance(params, dict):
            log.info("mcp.server_log", agent=self._mount.agent, **_log_fields(params))
            self._mount.calls.log(params)
        return None


def _log_fields(params: dict[str, Any]) -> dict[str, Any]:
    return {key: params.get(key) for key in ("level", "logger", "data")}


class McpMount:
    """Serves the mesh's side of one MCP server link (see the module docstring)."""

    def __init__(self, agent: str, *, revision: Revision = "auto") -> None:
        self.agent = agent
        self.requested: Revision = revision
        self.server_requests = _ServerRequests(self)
        #: The tool calls in flight, to pass the server's logs and asks during them on.
        self.calls = CallsInFlight(agent)
        self._peer: Peer | None = None
        self._negotiated: _Negotiated | None = None
        self._tools: list[dict[str, Any]] | None = None
        self._tools_generation = 0
        #: The link to the orchestrator (set by the connector once it serves the mesh).
        self.mesh_peer: Peer | None = None

    # -- the MCP side ------------------------------------------------------------------

    @property
    def revision(self) -> str | None:
        """The revision agreed with the server (None before :meth:`attach`)."""
        return None if self._negotiated is None else self._negotiated.revision

    @property
    def modern(self) -> bool:
        return self.revision == MODERN

    async def attach(self, peer: Peer, *, timeout: float) -> None:
        """Agree a revision with the server on ``peer`` and list its tools."""
        self._peer = peer
        self._negotiated = await self._negotiate(peer, timeout)
        log.info("mcp.mounted", agent=self.agent, revision=self.revision)
        await self.list_tools(timeout=timeout)

    async def _negotiate(self, peer: Peer, timeout: float) -> _Negotiated:
        if self.requested in ("auto", MODERN):
            try:
                found = await peer.call("server/discover", {"_meta": envelope()}, timeout=timeout)
            except RemoteError as exc:
                if self.requested == MODERN:
                    raise self._not_modern(f"server/discover answered: {exc.message}") from exc
            else:
                if isinstance(found, dict) and MODERN in found.get("supportedVersions", ()):
                    return _Negotiated(
                        MODERN,
                        _dict(_dict(found.get("_meta")).get("io.modelcontextprotocol/serverInfo")),
                        _dict(found.get("capabilities")),
                        str(found.get("instructions") or ""),
                    )
                if self.requested == MODERN:
                    raise self._not_modern("server/discover does not list it")
        return await self._handshake(peer, timeout)

    def _not_modern(self, why: str) -> ProtocolError:
        """A manifest pinned to 2026-07-28 and a server without it: asking again cannot help."""
        error = ProtocolError(
            f"the server does not speak {MODERN}, which mcp_revision pins ({why});"
            ' set mcp_revision = "auto" to use the handshake',
            agent=self.agent,
        )
        error.final = True
        return error

    async def _handshake(self, peer: Peer, timeout: float) -> _Negotiated:
        offer = LATEST_HANDSHAKE if self.requested in ("auto", MODERN) else self.requested
        params = {"protocolVersion": offer, "capabilities": ASKABLE, "clientInfo": IMPLEMENTATION}
        answer = _dict(await peer.call("initialize", params, timeout=timeout))
        revision = answer.get("protocolVersion")
        if revision not in HANDSHAKE_REVISIONS:
            raise ProtocolError(
                f"the server answered initialize with revision {revision!r};"
                f" the mesh speaks {', '.join(HANDSHAKE_REVISIONS)} and {MODERN}",
                agent=self.agent,
                method="initialize",
            )
        peer.notify_nowait("notifications/initialized")
        return _Negotiated(
            str(revision),
            _dict(answer.get("serverInfo")),
            _dict(answer.get("capabilities")),
            str(answer.get("instructions") or ""),
        )

    async def call_server(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        ctx: RequestContext | None = None,
    ) -> Any:
        """Call the MCP server (a 2026-07-28 request gets its envelope)."""
        peer = self._peer
        if peer is None:
            raise ConnectionLost("the MCP server is not connected", agent=self.agent)
        if self.modern:
            params = dict(params) if isinstance(params, Mapping) else {}
            meta = params.get("_meta")
            params["_meta"] = {**envelope(), **meta} if isinstance(meta, dict) else envelope()
        on_progress = None
        if ctx is not None:

            def on_progress(update: Mapping[str, Any]) -> None:
                progress = update.get("progress")
                total, message = update.get("total"), update.get("message")
                ctx.report_progress(
                    progress if isinstance(progress, int | float) else 0.0,
                    total if isinstance(total, int | float) else None,
                    message if isinstance(message, str) else None,
                )

        try:
            return await peer.call(method, params, timeout=timeout, on_progress=on_progress)
        except ConnectionLost:
            if ctx is not None and peer.closed:
                # The MCP link died, and the mesh side of the mount ends with it: that end
                # (exit status, last stderr lines) fails this call as the caller's own
                # ConnectionLost. Answered from here it would be a report: a RemoteError.
                await anyio.sleep_forever()
            raise

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """The server's tools, fetched now (every page) and cached."""
        generation = self._tools_generation
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params = {"cursor": cursor} if cursor else None
            page = _dict(await self.call_server("tools/list", params, timeout=timeout))
            tools.extend(t for t in page.get("tools", ()) if isinstance(t, dict))
            cursor = page.get("nextCursor") if isinstance(page.get("nextCursor"), str) else None
            if not cursor:
                break
        if generation == self._tools_generation:  # no list_changed came while we asked
            self._tools = tools
        return tools

    async def tools_changed(self) -> None:
        """``list_changed``: forget the cached list, fetch it again, and tell the mesh,
        which tells its own MCP clients (they may cache their lists)."""
        self._tools_generation += 1
        self._tools = None
        try:
            await self.list_tools(timeout=_REFRESH_TIMEOUT)
        except MeshError as exc:  # the next tools/list asks again
            log.info("mcp.tools_refresh_failed", agent=self.agent, error=str(exc))
        mesh = self.mesh_peer
        if mesh is not None and not mesh.closed:
            mesh.notify_nowait(TOOLS_CHANGED)

    def tell_mesh(self, notice: str, params: Any) -> None:
        """Pass a server's resource or prompt change on to the mesh, as an agent tells it."""
        mesh = self.mesh_peer
        if mesh is not None and not mesh.closed:
            mesh.notify_nowait(notice, params)

    async def listen_for_changes(self) -> None:
        """On 2026-07-28, ``list_changed`` comes only on a ``subscriptions/listen`` stream."""
        negotiated = self._negotiated
        tools = _dict(negotiated.capabilities.get("tools")) if negotiated else {}
        if not self.modern or not tools.get("listChanged"):
            return
        while True:
            params = {"notifications": {"toolsListChanged": True}}
            try:
                await self.call_server("subscriptions/listen", params, timeout=_LISTEN_FOR)
            except CallTimeout:
                continue  # streams are re-opened now and then; nothing was lost but time
            except MeshError as exc:
                log.info("mcp.listen_ended", agent=self.agent, error=str(exc))
                return

    # -- the mesh side (a RequestHandler) ----------------------------------------------

    def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        if method == "agent/info":
            return self._info()
        if method == "ping":
            return self._ping()
        if method == "tools/list":
            return self._list(params)
        if method == "tools/call":
            return self._call_tool(ctx, params)
        if method in _MESH_ONLY or method.startswith("mesh/"):
            raise MethodNotFound(f"MCP server {self.agent!r} does not serve {method!r}")
        return self.call_server(method, params, ctx=ctx)

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        log.debug("mcp.mesh_notification_ignored", agent=self.agent, method=method)

    def _info(self) -> dict[str, Any]:
        negotiated = self._negotiated
        server = negotiated.server_info if negotiated else {}
        return {
            "id": self.agent,
            "name": str(server.get("title") or server.get("name") or self.agent),
            "description": negotiated.instructions if negotiated else "",
            "version": str(server.get("version") or ""),
            "capabilities": [],
            "tools": [str(t.get("name")) for t in self._tools or ()],
            "protocol": "mcp",
            "revision": self.revision,
        }

    async def _ping(self) -> dict[str, Any]:
        # Any answer is proof of life: 2026-07-28 dropped ping itself ("not found").
        with contextlib.suppress(RemoteError):
            await self.call_server("ping")
        return {"agent": self.agent}

    async def _list(self, params: Any) -> dict[str, Any]:
        tools = self._tools
        if tools is None:
            tools = await self.list_tools()
        return {"tools": tools}

    async def _call_tool(self, ctx: RequestContext, params: Any) -> Any:
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(name, str):
            raise ProtocolError("tools/call needs a tool `name` - at `$.payload.params.name`")
        arguments = params.get("arguments")
        call = {"name": name, "arguments": arguments if isinstance(arguments, dict) else {}}
        # The mesh caller's deadline governs (its cancel reaches us and becomes MCP's
        # notifications/cancelled); ours only stops a call whose caller vanished.
        with self.calls.serving(ctx):
            result = await self.call_server("tools/call", call, ctx=ctx, timeout=_INNER_CEILING)
        return tool_result(name, result)


#: A refresh after ``list_changed`` gives up after this long (the next list retries).
_REFRESH_TIMEOUT: Final = 10.0
#: A listen stream is re-opened this often, so a dead one is noticed.
_LISTEN_FOR: Final = 300.0
#: Upper bound of a call to the server; the caller's own deadline is normally shorter.
_INNER_CEILING: Final = 3600.0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
