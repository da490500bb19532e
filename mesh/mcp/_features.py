"""Resources, prompts, completion and logging level for MCP clients, from the agents.

Each is a mesh method the agents answer (:mod:`mesh._sdk.features`; a mounted MCP
server answers them as its server does), called through the orchestrator's door on
behalf of the MCP client, as ``tools/call`` is: an agent's access rules decide who
may list, read, get or subscribe, and an agent the door refuses is left out of a
listing.

One agent's own server (``/mcp/{agent}``, ``mesh mcp --agent``) offers its URIs and
prompt names as they are. The combined server (``/mcp``, ``mesh mcp``) offers every
agent's: prompts as ``AGENT__NAME`` (the tools' rule, :mod:`mesh.mcp._names`), and
resource URIs and templates **unchanged** — a URI names its resource for every
client, and an agent's tool results and prompts refer to resources by those URIs. A
read goes to the agent that lists the URI (else whose template matches it); a URI two
agents claim is refused, naming them and their own servers.

A client hears ``notifications/resources/updated`` for the URIs it subscribed to, and
handshake-era clients ``notifications/resources/list_changed`` and
``notifications/prompts/list_changed``, as the agents tell the mesh of changes. Each
agent is subscribed once per URI, however many clients hold it (:class:`_Hub`).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

import anyio

from mesh._errors import InvalidParams, MeshError
from mesh._logging import get_logger
from mesh._orchestrator.access import Principal
from mesh._rpc.peer import RequestContext
from mesh._sdk.features import RESOURCE_NOT_FOUND, template_pattern
from mesh.mcp._catalog import McpMesh
from mesh.mcp._names import exposed_names
from registry import AgentStatus

__all__ = ["CAPABILITIES", "FEATURE_METHODS", "Features"]

log = get_logger("mesh.mcp")

#: What the features add to a server's capabilities (each is served for every agent).
CAPABILITIES: Final = {
    "resources": {"subscribe": True, "listChanged": True},
    "prompts": {"listChanged": True},
    "completions": {},
    "logging": {},
}
FEATURE_METHODS: Final = frozenset(
    {
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
    }
)
#: An agent that does not answer a listing this fast is left out of it.
LIST_TIMEOUT: Final = 5.0
#: Notifications kept for an HTTP session between its requests; older ones are dropped
#: (a client that never asks again must not hold the daemon's memory).
MAX_PENDING: Final = 64
_REACHABLE: Final = (AgentStatus.ONLINE, AgentStatus.STALE)
_NOTIFIED: Final = {
    "resources/list_changed": "notifications/resources/list_changed",
    "prompts/list_changed": "notifications/prompts/list_changed",
}

#: Sends one notification to the client: ``(method, params)``.
Notify = Callable[[str, Any], None]


class _Hub:
    """One per orchestrator: the agents' notices, fanned out to the servers that want them,
    and each ``(agent, uri)`` subscribed at the agent while any server holds it."""

    def __init__(self, mesh: McpMesh) -> None:
        self.mesh = mesh
        self.servers: weakref.WeakSet[Features] = weakref.WeakSet()
        self.holders: dict[tuple[str, str], int] = {}
        mesh.add_notice_listener(self._on_notice)

    def _on_notice(self, agent: str, method: str, params: Any) -> None:
        for server in list(self.servers):
            server.notice(agent, method, params)


_HUBS: weakref.WeakKeyDictionary[McpMesh, _Hub] = weakref.WeakKeyDictionary()


def _hub(mesh: McpMesh) -> _Hub:
    found = _HUBS.get(mesh)
    if found is None:
        found = _HUBS[mesh] = _Hub(mesh)
    return found


@dataclass(slots=True)
class _Found:
    """What the agents in scope list: entries under the names this server offers."""

    resources: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    #: Offered prompt name -> (agent, its own name).
    prompt_names: dict[str, tuple[str, str]] = field(default_factory=dict)


def _params(params: Any) -> dict[str, Any]:
    return params if isinstance(params, dict) else {}


def _uri(method: str, params: Any) -> str:
    uri = _params(params).get("uri")
    if not isinstance(uri, str) or not uri:
        raise InvalidParams(f"{method} needs the resource's `uri` - at `$.params.uri`")
    return uri


class Features:
    """The features of one MCP server (one client's session): its log level, its
    subscriptions, and the notifications owed to it (see the module docstring)."""

    def __init__(self, mesh: McpMesh, agent: str | None, on_behalf_of: Principal) -> None:
        self._hub = _hub(mesh)
        self._mesh = mesh
        #: The one agent served (its own server), or None: every reachable agent.
        self.agent = agent
        self._principal = on_behalf_of
        self.subscribed: set[tuple[str, str]] = set()
        #: Where notifications go; until set (an HTTP session), they wait in ``pending``.
        self.notify: Notify | None = None
        self.wants_list_changed: Callable[[], bool] = lambda: True
        self.pending: deque[tuple[str, Any]] = deque(maxlen=MAX_PENDING)
        #: Open ``subscriptions/listen`` streams (2026-07-28), each with what it asked for.
        self._streams: list[_Stream] = []
        self._hub.servers.add(self)

    # -- notifications -----------------------------------------------------------------

    def notice(self, agent: str, method: str, params: Any) -> None:
        """An agent's change: passed on when this client wants it."""
        for stream in self._streams:
            stream.notice(agent, method, params)
        if method == "resources/updated":
            uri = _params(params).get("uri")
            if (agent, uri) in self.subscribed:
                self._send("notifications/resources/updated", {"uri": uri})
        elif (self.agent is None or self.agent == agent) and self.wants_list_changed():
            self._send(_NOTIFIED[method], None)

    def _send(self, method: str, params: Any) -> None:
        if self.notify is not None:
            self.notify(method, params)
        else:
            self.pending.append((method, params))

    async def listen(
        self, wanted: Any, notify: Notify
    ) -> tuple[dict[str, Any], Callable[[], None]]:
        """A 2026-07-28 ``subscriptions/listen`` stream's share of the features: what it
        honours (``promptsListChanged``, ``resourcesListChanged``, ``resourceSubscriptions``,
        each URI subscribed through the door as ``resources/subscribe`` is), and how to
        end it. ``notify`` sends one notification on the stream."""
        asked = _params(wanted)
        uris = asked.get("resourceSubscriptions")
        uris = [u for u in uris if isinstance(u, str) and u] if isinstance(uris, list) else []
        stream = _Stream(
            self.agent,
            prompts=asked.get("promptsListChanged") is True,
            resources=asked.get("resourcesListChanged") is True,
            notify=notify,
        )
        for uri in uris:
            agent = await self._owner(uri)
            await self._call(agent, "resources/subscribe", {"uri": uri})
            stream.uris.add((agent, uri))
        self._streams.append(stream)
        return stream.honored(uris), partial(self._streams.remove, stream)

    def close(self) -> None:
        """The client left: let go of its subscriptions."""
        self._hub.servers.discard(self)
        for agent, uri in list(self.subscribed):
            self._release(agent, uri)
        self.subscribed.clear()

    # -- answering ---------------------------------------------------------------------

    async def handle(self, ctx: RequestContext, method: str, params: Any) -> dict[str, Any]:
        """Answer one of :data:`FEATURE_METHODS`."""
        if method == "resources/list":
            return {"resources": _public((await self._listing(resources=True)).resources)}
        if method == "resources/templates/list":
            found = await self._listing(templates=True)
            return {"resourceTemplates": _public(found.templates)}
        if method == "prompts/list":
            return {"prompts": _public((await self._listing(prompts=True)).prompts)}
        if method == "resources/read":
            uri = _uri(method, params)
            return await self._call(await self._owner(uri), method, {"uri": uri})
        if method == "resources/subscribe":
            return await self._subscribe(_uri(method, params))
        if method == "resources/unsubscribe":
            return await self._unsubscribe(_uri(method, params))
        if method == "prompts/get":
            return await self._get_prompt(params)
        return await self._complete(params)

    async def _call(self, agent: str, method: str, params: Any) -> dict[str, Any]:
        """Call ``agent`` through the door, on the client's behalf; its error is ours."""
        try:
            answer = await self._mesh.call(agent, method, params, on_behalf_of=self._principal)
        except MeshError as exc:
            # The agent's own code and words (-32002 for an unknown URI, the door's rule).
            raise MeshError(exc.message, code=exc.code, data=exc.data) from None
        return answer if isinstance(answer, dict) else {}

    def _agents(self) -> list[str]:
        if self.agent is not None:
            return [self.agent]
        return sorted(str(r.id) for r in self._mesh.registry.find(status=_REACHABLE))

    async def _listing(
        self, *, resources: bool = False, templates: bool = False, prompts: bool = False
    ) -> _Found:
        """What every agent in scope lists (those the door refuses or that fail: none)."""
        agents = self._agents()
        asked = [
            (agent, method)
            for agent in agents
            for method, wanted in (
                ("resources/list", resources),
                ("resources/templates/list", templates),
                ("prompts/list", prompts),
            )
            if wanted
        ]
        answers: dict[tuple[str, str], dict[str, Any]] = {}

        async def ask(agent: str, method: str) -> None:
            try:
                with anyio.fail_after(LIST_TIMEOUT):
                    answers[(agent, method)] = await self._mesh.call(
                        agent, method, timeout=LIST_TIMEOUT, on_behalf_of=self._principal
                    )
            except (MeshError, TimeoutError) as exc:
                log.debug("mcp.feature_list_skipped", agent=agent, method=method, error=str(exc))

        async with anyio.create_task_group() as tg:
            for agent, method in asked:
                tg.start_soon(ask, agent, method)
        return self._found(agents, answers)

    def _found(self, agents: list[str], answers: dict[tuple[str, str], dict[str, Any]]) -> _Found:
        found = _Found()
        pairs: list[tuple[str, str]] = []
        entries: dict[tuple[str, str], dict[str, Any]] = {}
        own = self.agent is not None
        for agent in agents:
            for entry in _entries(answers.get((agent, "resources/list")), "resources"):
                found.resources.append(entry if own else _marked(entry, agent))
            for entry in _entries(
                answers.get((agent, "resources/templates/list")), "resourceTemplates"
            ):
                found.templates.append(entry if own else _marked(entry, agent))
            for entry in _entries(answers.get((agent, "prompts/list")), "prompts"):
                if isinstance(entry.get("name"), str):
                    pairs.append((agent, entry["name"]))
                    entries[(agent, entry["name"])] = entry
        own = self.agent is not None
        offered = {pair[1]: pair for pair in pairs} if own else exposed_names(pairs)
        for name, pair in offered.items():
            entry = dict(entries[pair])
            entry["name"] = name
            found.prompts.append(entry if own else _marked(entry, pair[0]))
            found.prompt_names[name] = pair
        return found

    async def _owner(self, uri: str) -> str:
        """The agent whose resource (else template) ``uri`` is."""
        if self.agent is not None:
            return self.agent
        found = await self._listing(resources=True, templates=True)
        owners = sorted({e["_agent"] for e in found.resources if e.get("uri") == uri})
        if not owners:
            owners = sorted(
                {
                    e["_agent"]
                    for e in found.templates
                    if isinstance(e.get("uriTemplate"), str)
                    and template_pattern(e["uriTemplate"])[1].fullmatch(uri)
                }
            )
        if len(owners) == 1:
            return str(owners[0])
        if not owners:
            raise MeshError(
                f"no agent offers resource {uri[:200]!r} (resources/list and "
                "resources/templates/list name them)",
                code=RESOURCE_NOT_FOUND,
                data={"uri": uri[:200]},
            )
        raise InvalidParams(
            f"resource {uri[:200]!r} is offered by several agents ({', '.join(owners)}); "
            f"read it from one agent's own server, /mcp/{{agent}} or `mesh mcp --agent`"
        )

    async def _subscribe(self, uri: str) -> dict[str, Any]:
        agent = await self._owner(uri)
        # Every client's subscribe passes the door; the agent hears it once per URI.
        await self._call(agent, "resources/subscribe", {"uri": uri})
        if (agent, uri) not in self.subscribed:
            self.subscribed.add((agent, uri))
            self._hub.holders[(agent, uri)] = self._hub.holders.get((agent, uri), 0) + 1
        return {}

    async def _unsubscribe(self, uri: str) -> dict[str, Any]:
        for agent, held in list(self.subscribed):
            if held == uri:
                self.subscribed.discard((agent, uri))
                if self._release(agent, uri):
                    # Nobody holds it now: the agent may stop telling us of it.
                    await self._call(agent, "resources/unsubscribe", {"uri": uri})
        return {}

    def _release(self, agent: str, uri: str) -> bool:
        """Let go of one hold; whether it was the last (a client that leaves does not
        unsubscribe at the agent: its updates are then dropped here, and the next
        subscribe is answered as the first)."""
        left = self._hub.holders.get((agent, uri), 1) - 1
        if left > 0:
            self._hub.holders[(agent, uri)] = left
            return False
        self._hub.holders.pop((agent, uri), None)
        return True

    async def _get_prompt(self, params: Any) -> dict[str, Any]:
        given = _params(params)
        name = given.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidParams("prompts/get needs the prompt's `name` - at `$.params.name`")
        agent, own = await self._prompt(name)
        return await self._call(agent, "prompts/get", {**given, "name": own})

    async def _prompt(self, name: str) -> tuple[str, str]:
        if self.agent is not None:
            return self.agent, name
        found = (await self._listing(prompts=True)).prompt_names.get(name)
        if found is None:
            raise InvalidParams(f"unknown prompt {name[:200]!r}; prompts/list names them all")
        return found

    async def _complete(self, params: Any) -> dict[str, Any]:
        given = _params(params)
        ref = _params(given.get("ref"))
        if ref.get("type") == "ref/prompt" and isinstance(ref.get("name"), str):
            agent, own = await self._prompt(ref["name"])
            ref = {**ref, "name": own}
        elif ref.get("type") == "ref/resource" and isinstance(ref.get("uri"), str):
            agent = await self._template_owner(ref["uri"])
        else:
            raise InvalidParams(
                "completion/complete needs a `ref` of type ref/prompt (with `name`) or"
                " ref/resource (with `uri`) - at `$.params.ref`"
            )
        return await self._call(agent, "completion/complete", {**given, "ref": ref})

    async def _template_owner(self, template: str) -> str:
        if self.agent is not None:
            return self.agent
        found = await self._listing(templates=True)
        owners = sorted({e["_agent"] for e in found.templates if e.get("uriTemplate") == template})
        if len(owners) != 1:
            raise InvalidParams(
                f"resource template {template[:200]!r} is offered by "
                f"{', '.join(owners) or 'no agent'}; complete it at one agent's own server"
                if owners
                else f"no agent offers resource template {template[:200]!r}"
            )
        return str(owners[0])


@dataclass(slots=True)
class _Stream:
    """One ``subscriptions/listen`` stream: the changes it asked to hear of."""

    agent: str | None
    prompts: bool
    resources: bool
    notify: Notify
    uris: set[tuple[str, str]] = field(default_factory=set)

    def honored(self, uris: list[str]) -> dict[str, Any]:
        honored: dict[str, Any] = {}
        if self.prompts:
            honored["promptsListChanged"] = True
        if self.resources:
            honored["resourcesListChanged"] = True
        if uris:
            honored["resourceSubscriptions"] = uris
        return honored

    def notice(self, agent: str, method: str, params: Any) -> None:
        if method == "resources/updated":
            uri = _params(params).get("uri")
            if (agent, uri) in self.uris:
                self.notify("notifications/resources/updated", {"uri": uri})
            return
        wanted = self.prompts if method == "prompts/list_changed" else self.resources
        if wanted and (self.agent is None or self.agent == agent):
            self.notify(_NOTIFIED[method], {})


def _entries(answer: Any, key: str) -> list[dict[str, Any]]:
    listed = _params(answer).get(key)
    return [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []


def _public(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "_agent"} for e in entries]


def _marked(entry: dict[str, Any], agent: str) -> dict[str, Any]:
    """An entry of the combined server: whose it is, in its description (and, kept
    back from the client, in ``_agent``)."""
    marked = dict(entry)
    marked["description"] = f"[agent {agent}] {entry.get('description') or ''}".rstrip()
    marked["_agent"] = agent
    return marked
