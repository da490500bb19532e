"""The mesh's tools as one MCP server offers them: every reachable agent's, under MCP names.

A :class:`ToolCatalog` lists the tools of every agent the registry holds online
(or stale: late with a beat, still callable), names them (:mod:`mesh.mcp._names`),
and turns an MCP ``tools/call`` back into a call to the agent. It follows the
registry, so when agents come or go (or an agent says its tools changed, as a
mounted MCP server does) every MCP connection is told ``list_changed``. ``extra``
tools (the daemon's room tools) are offered beside the agents' under names of
their own, which never contain ``__``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, Unpack

import anyio
import msgspec

from mesh import content
from mesh._errors import MeshError
from mesh._logging import get_logger
from mesh._orchestrator.access import DAEMON, NOBODY, Principal
from mesh._orchestrator.bound import Doorway
from mesh._rpc.asks import AskHandlers
from mesh._rpc.caller import ProgressCallback
from mesh.mcp._names import SEPARATOR, exposed_names
from registry import AgentStatus, StatusChange

__all__ = [
    "AgentCatalog",
    "Authorize",
    "Catalog",
    "ExtraTool",
    "ToolCatalog",
    "call_result",
    "error_result",
]

log = get_logger("mesh.mcp")

#: An agent that does not answer ``tools/list`` this fast is left out of one listing.
LIST_TIMEOUT: Final = 5.0
#: A listing is reused this long while the set of agents stays the same, so clients
#: that list in a loop cost the agents one listing per second at most.
LIST_FRESH: Final = 1.0
#: Agents asked for their tools at once while a listing is made.
LIST_CONCURRENCY: Final = 32
_REACHABLE: Final = (AgentStatus.ONLINE, AgentStatus.STALE)
_ANSWER_SLACK: Final = 64 * 1024
_ANY_OBJECT: Final = {"type": "object"}
_encode: Final = msgspec.json.Encoder().encode


#: Who may call what, for one client: ``authorize(agent, tool)`` raises a MeshError
#: to refuse (``agent`` is None for an extra tool, ``tool`` then its name).
Authorize = Callable[[str | None, str], None]


@dataclass(frozen=True, slots=True)
class ExtraTool:
    """A tool the server offers besides the agents'.

    ``call(arguments, caller)`` answers it; ``caller`` is whoever the server was
    told it serves (the daemon's token identity; None when embedded).
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    call: Callable[[dict[str, Any], Any], Awaitable[Any]]

    def __post_init__(self) -> None:
        if SEPARATOR in self.name:
            raise ValueError(f"extra tool names must not contain {SEPARATOR!r}: {self.name!r}")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }


@dataclass(frozen=True, slots=True)
class _Target:
    agent: str
    tool: str
    #: The agent's output schema is not an object, so results travel as {"result": ...}.
    wrapped: bool = False


@dataclass(slots=True)
class _Listing:
    tools: list[dict[str, Any]] = field(default_factory=list)
    targets: dict[str, _Target] = field(default_factory=dict)
    #: Each agent's tools under their own names, for its own server (``/mcp/{agent}``).
    own: dict[str, dict[str, tuple[dict[str, Any], _Target]]] = field(default_factory=dict)
    version: int = -1  # the catalog's version when it was made
    made_at: float = float("-inf")


def call_result(result: Any, *, wrapped: bool = False) -> dict[str, Any]:
    """A mesh result as MCP's ``CallToolResult``: text for every client, and the
    structure for those that read ``structuredContent``. Content items
    (:mod:`mesh.content`) are MCP's own: they go as they came, fields the mesh does
    not read (``annotations``, ``_meta``) kept, once they are checked."""
    if isinstance(result, dict) and content.CONTENT_KEY in result:
        return _content_result(result, wrapped)
    # msgspec, not json.dumps: this runs on every served call (compact JSON, UTF-8 kept).
    text = result if isinstance(result, str) else _encode(result).decode()
    answer: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if wrapped:
        answer["structuredContent"] = {"result": result}
    elif isinstance(result, dict):
        answer["structuredContent"] = result
    return answer


def _content_result(result: dict[str, Any], wrapped: bool) -> dict[str, Any]:
    try:
        content.decode(result)
    except MeshError as exc:
        return error_result(str(exc))
    answer: dict[str, Any] = {"content": result[content.CONTENT_KEY], "isError": False}
    structured = result.get(content.STRUCTURED_KEY)
    if structured is not None:
        answer["structuredContent"] = {"result": structured} if wrapped else structured
    return answer


def error_result(message: str) -> dict[str, Any]:
    """A failed call as MCP wants it: a result with ``isError``, so the model reads why."""
    return {"content": [{"type": "text", "text": message}], "isError": True}


def _describe(name: str, agent: str, tool: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """One agent tool as an MCP tool entry, and whether its results are wrapped."""
    description = str(tool.get("description") or "")
    entry: dict[str, Any] = {
        "name": name,
        "title": f"{tool.get('title') or tool.get('name')} ({agent})",
        "description": f"[agent {agent}] {description}".rstrip(),
    }
    return _schemas(entry, tool)


def _describe_own(tool: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """One agent tool as its own server lists it: its name, title and description."""
    entry: dict[str, Any] = {"name": str(tool["name"])}
    entry.update((key, tool[key]) for key in ("title", "description") if tool.get(key))
    return _schemas(entry, tool)


def _schemas(entry: dict[str, Any], tool: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``entry`` with the tool's schemas and annotations, and whether results are wrapped."""
    schema = tool.get("inputSchema")
    entry["inputSchema"] = schema if isinstance(schema, dict) and schema else _ANY_OBJECT
    output = tool.get("outputSchema")
    wrapped = False
    if isinstance(output, dict) and output:
        if output.get("type") == "object":
            entry["outputSchema"] = output
        else:  # MCP wants an object; the mesh allows any value
            wrapped = True
            entry["outputSchema"] = {
                "type": "object",
                "properties": {"result": output},
                "required": ["result"],
            }
    if isinstance(tool.get("annotations"), dict):
        entry["annotations"] = tool["annotations"]
    return entry, wrapped


class McpMesh(Doorway, Protocol):
    """What MCP needs of the mesh: the door (its calls and checks, the registry to read),
    the agents' notices, and the largest frame an agent may send.

    :class:`~mesh.MeshOrchestrator` is one; through it MCP reaches no link.
    """

    def add_tools_listener(self, listener: Callable[[str], None]) -> None: ...

    def remove_tools_listener(self, listener: Callable[[str], None]) -> None: ...

    def add_notice_listener(self, listener: Callable[[str, str, Any], None]) -> None: ...

    def remove_notice_listener(self, listener: Callable[[str, str, Any], None]) -> None: ...

    def largest_frame_size(self) -> int: ...


class ToolCatalog:
    """Lists and calls the mesh's tools for MCP clients (see the module docstring)."""

    def __init__(self, orchestrator: McpMesh, *, extra: Iterable[ExtraTool] = ()) -> None:
        self._mesh = orchestrator
        self._extra = {tool.name: tool for tool in extra}
        self._listing = _Listing()
        #: Set when the listing being made is done; None while none is being made.
        self._listed: anyio.Event | None = None
        self._changed = anyio.Event()
        #: Bumped whenever the set of reachable agents changes.
        self.version = 0

    # -- following the registry ---------------------------------------------------------

    def attach(self) -> None:
        """Start following the registry and the agents' own tool changes (until :meth:`detach`)."""
        self._mesh.registry.add_listener(self._on_change)
        self._mesh.add_tools_listener(self._on_tools_changed)

    def detach(self) -> None:
        self._mesh.registry.remove_listener(self._on_change)
        self._mesh.remove_tools_listener(self._on_tools_changed)

    def _on_change(self, change: StatusChange) -> None:
        was = change.old in _REACHABLE
        now = change.new in _REACHABLE
        if was != now or change.old is None:
            self._bump()

    def _on_tools_changed(self, agent: str) -> None:
        """A mounted MCP server's own ``list_changed``, after the mount refreshed its list."""
        self._bump()

    def _bump(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_changed(self, since: int) -> int:
        """Until the set of agents differs from version ``since``; the new version."""
        while self.version == since:
            await self._changed.wait()
        return self.version

    @property
    def orchestrator(self) -> McpMesh:
        """The mesh this catalog serves (resources and prompts are asked of it too)."""
        return self._mesh

    def answer_limit(self) -> int:
        """The largest answer an MCP client may be sent: a result goes as text *and* as
        ``structuredContent`` (docs/mcp.md says why), so twice the largest agent's
        ``max_frame_size``, plus room for the envelope and the text's escapes."""
        return 2 * self._mesh.largest_frame_size() + _ANSWER_SLACK

    # -- listing and calling ------------------------------------------------------------

    async def list_tools(self, *, authorize: Authorize | None = None) -> list[dict[str, Any]]:
        """Every reachable agent's tools, then the extra tools (those ``authorize`` allows).

        Each agent is asked, unless a listing made under the same set of agents is
        under ``LIST_FRESH`` seconds old: however often clients list, the agents
        are asked at most that often (an agent's own list changing, as a mounted
        MCP server's can, shows within that time). Clients that list while a listing
        is being made wait for it rather than ask every agent again, and the agents
        are asked ``LIST_CONCURRENCY`` at a time.
        """
        listing = await self._current_listing()
        if authorize is None:
            return list(listing.tools)
        return [tool for tool in listing.tools if _allowed(authorize, listing, tool["name"])]

    async def _current_listing(self) -> _Listing:
        while True:  # ends: each turn returns, or waits for a listing that ends
            listing, now = self._listing, anyio.current_time()
            if listing.version == self.version and now - listing.made_at < LIST_FRESH:
                return listing
            listed = self._listed
            if listed is None:
                break
            await listed.wait()
            if self._listing is not listing:
                return self._listing  # made while we waited: as fresh as a listing gets
            # Its maker was cancelled before it finished: list again.
        self._listed = listed = anyio.Event()
        try:
            return await self._list_agents(now)
        finally:
            self._listed = None
            listed.set()

    async def _list_agents(self, now: float) -> _Listing:
        version = self.version
        agents = [str(r.id) for r in self._mesh.registry.find(status=_REACHABLE)]
        found: dict[str, list[dict[str, Any]]] = {}
        left = agents[::-1]

        async def ask() -> None:
            while left:  # ends: each turn takes one agent off the list
                agent = left.pop()
                try:
                    found[agent] = await self._mesh.list_tools(
                        agent, timeout=LIST_TIMEOUT, on_behalf_of=DAEMON
                    )
                except MeshError as exc:
                    log.info("mcp.agent_tools_unavailable", agent=agent, error=str(exc))

        async with anyio.create_task_group() as tg:
            for _ in range(min(LIST_CONCURRENCY, len(agents))):
                tg.start_soon(ask)
        listing = self._listing = self._build(agents, found)
        listing.version, listing.made_at = version, now
        return listing

    def _build(self, agents: list[str], found: dict[str, list[dict[str, Any]]]) -> _Listing:
        pairs = [
            (agent, str(tool.get("name")))
            for agent in agents
            for tool in found.get(agent, ())
            if isinstance(tool, dict) and tool.get("name")
        ]
        by_pair = {(a, str(t.get("name"))): t for a in agents for t in found.get(a, ())}
        listing = _Listing()
        for name, (agent, tool_name) in exposed_names(pairs).items():
            entry, wrapped = _describe(name, agent, by_pair[(agent, tool_name)])
            listing.tools.append(entry)
            listing.targets[name] = _Target(agent, tool_name, wrapped)
        listing.tools.extend(tool.describe() for tool in self._extra.values())
        for agent, tool_name in pairs:
            own, wrapped = _describe_own(by_pair[(agent, tool_name)])
            listing.own.setdefault(agent, {})[tool_name] = (own, _Target(agent, tool_name, wrapped))
        return listing

    def agent_catalog(self, agent: str) -> AgentCatalog:
        """One agent's tools under their own names: the catalog of its own MCP server."""
        return AgentCatalog(self, agent)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        on_progress: ProgressCallback | None = None,
        authorize: Authorize | None = None,
        caller: Any = None,
        on_behalf_of: Principal = NOBODY,
        **asks: Unpack[AskHandlers],
    ) -> dict[str, Any] | None:
        """The ``CallToolResult`` for ``name``; None if no tool has that name.

        ``on_progress`` hears the agent's progress reports while the call runs;
        ``authorize`` may refuse the call (its error becomes the ``isError`` answer),
        and so may the orchestrator's door, which an agent's tool is called through
        ``on_behalf_of``.
        """
        extra = self._extra.get(name)
        if extra is not None:
            if authorize is not None:
                refused = _refusal(authorize, None, name)
                if refused is not None:
                    return refused
            return await _answer(extra.call(arguments, caller), wrapped=False)
        target = self._listing.targets.get(name)
        if target is None:
            # The client may not have listed since agents changed (bounded: see list_tools).
            await self.list_tools()
            target = self._listing.targets.get(name)
            if target is None:
                return None
        return await self.call_target(
            target, arguments, on_progress, authorize=authorize, on_behalf_of=on_behalf_of, **asks
        )

    async def call_target(
        self,
        target: _Target,
        arguments: dict[str, Any],
        on_progress: ProgressCallback | None,
        *,
        authorize: Authorize | None,
        on_behalf_of: Principal,
        **asks: Unpack[AskHandlers],
    ) -> dict[str, Any]:
        """Call one agent's tool (``authorize`` and the door permitting); its logs and
        asks go to ``asks``' handlers."""
        if authorize is not None:
            refused = _refusal(authorize, target.agent, target.tool)
            if refused is not None:
                return refused
        called = self._mesh.call_tool(
            target.agent,
            target.tool,
            arguments,
            on_progress=on_progress,
            on_behalf_of=on_behalf_of,
            **asks,
        )
        return await _answer(called, target.wrapped)

    async def own_tools(self, agent: str) -> dict[str, tuple[dict[str, Any], _Target]]:
        """``agent``'s tools under their own names (listed as :meth:`list_tools` lists)."""
        return (await self._current_listing()).own.get(agent, {})


class AgentCatalog:
    """One agent's tools as a server of its own offers them (``/mcp/{agent}``): under
    their own names, with no extra tools; listing and calling go through the combined
    :class:`ToolCatalog`, so its bounds, freshness and door hold here too."""

    def __init__(self, catalog: ToolCatalog, agent: str) -> None:
        self._catalog = catalog
        self.agent = agent

    @property
    def version(self) -> int:
        return self._catalog.version

    @property
    def orchestrator(self) -> McpMesh:
        return self._catalog.orchestrator

    async def wait_changed(self, since: int) -> int:
        return await self._catalog.wait_changed(since)

    def answer_limit(self) -> int:
        return self._catalog.answer_limit()

    async def list_tools(self, *, authorize: Authorize | None = None) -> list[dict[str, Any]]:
        own = await self._catalog.own_tools(self.agent)
        return [
            entry
            for entry, target in own.values()
            if authorize is None or _refusal(authorize, target.agent, target.tool) is None
        ]

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        on_progress: ProgressCallback | None = None,
        authorize: Authorize | None = None,
        caller: Any = None,
        on_behalf_of: Principal = NOBODY,
        **asks: Unpack[AskHandlers],
    ) -> dict[str, Any] | None:
        """As :meth:`ToolCatalog.call_tool`, by the tool's own name."""
        found = (await self._catalog.own_tools(self.agent)).get(name)
        if found is None:
            return None
        return await self._catalog.call_target(
            found[1], arguments, on_progress, authorize=authorize, on_behalf_of=on_behalf_of, **asks
        )


#: What an MCP server serves: every agent's tools, or one agent's.
Catalog = ToolCatalog | AgentCatalog


def _refusal(authorize: Authorize, agent: str | None, tool: str) -> dict[str, Any] | None:
    try:
        authorize(agent, tool)
    except MeshError as exc:
        return error_result(str(exc))
    return None


def _allowed(authorize: Authorize, listing: _Listing, name: str) -> bool:
    target = listing.targets.get(name)
    agent, tool = (target.agent, target.tool) if target is not None else (None, name)
    return _refusal(authorize, agent, tool) is None


async def _answer(pending: Awaitable[Any], wrapped: bool) -> dict[str, Any]:
    try:
        result = await pending
    except MeshError as exc:
        return error_result(str(exc))
    return call_result(result, wrapped=wrapped)
