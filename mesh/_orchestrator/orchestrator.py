"""The MeshOrchestrator: every agent, one registry, one way to call them.

Each agent is a *link*: a connector (stdio, HTTP, WebSocket, in-memory) kept up by
:func:`~mesh.open_reconnecting_peer`, or a connection the agent dialled in on.
The registry is kept truthful from the links: a connected agent is registered,
each answered ``ping`` probe is a heartbeat (so a frozen agent goes stale, then
offline, within its TTL), and a lost link marks it offline at once.

Calls go through :meth:`MeshOrchestrator.call`; an agent the registry does not
know, or knows offline, fails at once with :class:`~mesh.AgentUnavailable`. Agents
reach each other through the ``mesh/call`` method the orchestrator serves on
every link, with the deadline carried along.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Self

import anyio
import anyio.abc
import msgspec
import structlog

from mesh._errors import AgentUnavailable, InvalidParams, MeshError, MethodNotFound
from mesh._rpc.peer import Peer, ProgressCallback, RequestContext, open_peer
from mesh._rpc.reconnect import (
    ConnectionEvent,
    ReconnectingPeer,
    ReconnectPolicy,
    open_reconnecting_peer,
)
from mesh._rpc.session import SessionConfig
from mesh._sdk.agent import Agent
from registry import AgentId, AgentRecord, AgentStatus, Registry, run_expiry
from transports import FrameStream, memory_stream_pair, unwrap_single_error

__all__ = ["AgentSpec", "MeshOrchestrator", "Outcome", "local_connector"]

log = structlog.get_logger("mesh.orchestrator")

#: How long a broadcast waits per agent unless told otherwise.
DEFAULT_BROADCAST_TIMEOUT: Final = 10.0
#: Closing every link at shutdown (stdio children included) gets this long in total.
CLOSE_LINKS_TIMEOUT: Final = 10.0
#: A link is only torn down for silence this long after the registry's TTL: the
#: registry says offline first, and a frozen agent that thaws comes back on the
#: same link (seen in tests with SIGSTOP / SIGCONT).
LINK_SILENCE_GRACE: Final = 60.0

Connector = Callable[[], AbstractAsyncContextManager[FrameStream]]


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """What the orchestrator needs to know to link one agent (a manifest, distilled)."""

    id: str
    connector: Connector | None
    name: str = ""
    transport: str = "memory"
    endpoint: str | None = None
    capabilities: frozenset[str] = frozenset()
    heartbeat_interval: float = 10.0
    #: Seconds of silence before the agent is offline; 0 means three intervals.
    heartbeat_ttl: float = 0.0
    call_timeout: float = 30.0
    max_frame_size: int = 1 << 20
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.heartbeat_ttl == 0.0:
            object.__setattr__(self, "heartbeat_ttl", 3 * self.heartbeat_interval)

    def session_config(self) -> SessionConfig:
        return SessionConfig(
            call_timeout=self.call_timeout,
            heartbeat_interval=self.heartbeat_interval,
            heartbeat_ttl=self.heartbeat_ttl + LINK_SILENCE_GRACE,
            max_frame_size=self.max_frame_size,
        )

    def record(self) -> AgentRecord:
        return AgentRecord(
            id=AgentId(self.id),
            name=self.name or self.id,
            transport=self.transport,
            endpoint=self.endpoint,
            capabilities=self.capabilities,
            metadata=dict(self.metadata),
            heartbeat_interval=self.heartbeat_interval,
            heartbeat_ttl=self.heartbeat_ttl,
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """One agent's answer to a broadcast: a result, or the error that names why not."""

    agent: str
    result: Any = None
    error: MeshError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class _RouteParams(msgspec.Struct, forbid_unknown_fields=True):
    agent: str
    method: str
    params: Any = None
    timeout: float | None = None


class _Link:
    """One agent's connection, whichever side dialled."""

    def __init__(self, spec: AgentSpec) -> None:
        self.spec = spec
        self.peer: ReconnectingPeer | Peer | None = None
        self.last_error: str | None = None
        self.settled = anyio.Event()  # first connection attempt finished, either way

    @property
    def connected(self) -> bool:
        peer = self.peer
        if peer is None:
            return False
        return peer.connected if isinstance(peer, ReconnectingPeer) else not peer.closed


class MeshOrchestrator:
    """Connects agents, keeps the registry, and calls, routes and broadcasts.

    Use it as ``async with MeshOrchestrator.from_manifests("manifests") as mesh:``
    (or build it from :class:`AgentSpec` values); leaving the block closes every
    link and stops every child process.
    """

    def __init__(
        self,
        specs: Iterable[AgentSpec] = (),
        *,
        registry: Registry | None = None,
        policy: ReconnectPolicy | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.registry = registry or Registry()
        self._policy = policy or ReconnectPolicy()
        self._connect_timeout = connect_timeout
        self._links: dict[str, _Link] = {}
        self._pending_specs = list(specs)
        self._tasks: anyio.abc.TaskGroup | None = None
        self._router = _Router(self)
        self.manifest_errors: list[MeshError] = []

    @classmethod
    def from_manifests(
        cls, directory: str | Any, *, environ: Mapping[str, str] | None = None, **kwargs: Any
    ) -> Self:
        """Load every manifest in ``directory``; broken ones are kept in ``manifest_errors``."""
        from mesh._orchestrator.links import specs_from_manifests

        specs, errors = specs_from_manifests(directory, environ=environ)
        orchestrator = cls(specs, **kwargs)
        orchestrator.manifest_errors.extend(errors)
        for error in errors:
            log.error("mesh.manifest_invalid", error=str(error))
        return orchestrator

    # -- lifetime ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._stack = self._run()
        await self._stack.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[None]:
        with unwrap_single_error():
            async with anyio.create_task_group() as tg:
                self._tasks = tg
                await tg.start(run_expiry, self.registry)
                for spec in self._pending_specs:
                    self.add_agent(spec)
                self._pending_specs.clear()
                # Give every agent its first chance to connect, bounded.
                with anyio.move_on_after(self._connect_timeout + 1):
                    for link in list(self._links.values()):
                        await link.settled.wait()
                try:
                    yield
                finally:
                    await self._close_links()
                    tg.cancel_scope.cancel()

    async def _close_links(self) -> None:
        """Close every link on purpose (no "disconnected" alarms), all at once, bounded."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_LINKS_TIMEOUT):
            async with anyio.create_task_group() as tg:
                for link in self._links.values():
                    if link.peer is not None:
                        tg.start_soon(link.peer.aclose)

    def add_agent(self, spec: AgentSpec) -> None:
        """Start linking an agent (connector-based), or reserve its place (dial-in)."""
        if spec.id in self._links:
            raise ValueError(f"agent {spec.id!r} is already linked")
        link = self._links[spec.id] = _Link(spec)
        if spec.connector is None:
            link.settled.set()
            return
        if self._tasks is None:
            self._pending_specs.append(spec)
            del self._links[spec.id]
            return
        self._tasks.start_soon(self._maintain, link)

    async def remove_agent(self, agent_id: str) -> None:
        link = self._links.pop(agent_id, None)
        if link is not None and link.peer is not None:
            await link.peer.aclose()
        if self.registry.get(AgentId(agent_id)) is not None:
            self.registry.deregister(AgentId(agent_id), anyio.current_time())

    # -- calling ----------------------------------------------------------------------

    async def call(
        self,
        agent_id: str,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Any:
        """Call ``method`` on an agent. Unknown or offline agents fail at once.

        ``on_progress`` receives the params of each ``progress`` the agent reports.
        """
        link = self._available(agent_id, method)
        peer = link.peer
        assert peer is not None
        if isinstance(peer, ReconnectingPeer):
            return await peer.call(
                method,
                params,
                timeout=timeout,
                on_progress=on_progress,
                wait_for_connection=False,
            )
        return await peer.call(method, params, timeout=timeout, on_progress=on_progress)

    async def call_tool(
        self, agent_id: str, name: str, /, *, timeout: float | None = None, **arguments: Any
    ) -> Any:
        """Call one of an agent's tools: ``await mesh.call_tool("echo", "echo", message="hi")``."""
        return await self.call(
            agent_id, "tools/call", {"name": name, "arguments": arguments}, timeout=timeout
        )

    async def list_tools(
        self, agent_id: str, *, timeout: float | None = None
    ) -> list[dict[str, Any]]:
        result = await self.call(agent_id, "tools/list", timeout=timeout)
        return list(result["tools"])

    async def ping(self, agent_id: str, *, timeout: float | None = None) -> float:
        started = anyio.current_time()
        await self.call(agent_id, "ping", timeout=timeout)
        return anyio.current_time() - started

    async def broadcast(
        self,
        method: str,
        params: Any = None,
        *,
        capability: str | None = None,
        timeout: float = DEFAULT_BROADCAST_TIMEOUT,
    ) -> dict[str, Outcome]:
        """Call every registered agent (with ``capability``, if given); see :meth:`multicast`."""
        targets = [record.id for record in self.registry.find(capability)]
        return await self.multicast(targets, method, params, timeout=timeout)

    async def multicast(
        self,
        agent_ids: Iterable[str],
        method: str,
        params: Any = None,
        *,
        timeout: float = DEFAULT_BROADCAST_TIMEOUT,
    ) -> dict[str, Outcome]:
        """Call several agents at once; each answers or fails on its own, all by ``timeout``."""
        ids = list(dict.fromkeys(agent_ids))
        outcomes: dict[str, Outcome] = {}

        async def one(agent_id: str) -> None:
            try:
                result = await self.call(agent_id, method, params, timeout=timeout)
            except MeshError as exc:
                outcomes[agent_id] = Outcome(agent_id, error=exc)
            else:
                outcomes[agent_id] = Outcome(agent_id, result=result)

        async with anyio.create_task_group() as tg:
            for agent_id in ids:
                tg.start_soon(one, agent_id)
        return {agent_id: outcomes[agent_id] for agent_id in ids}

    def _available(self, agent_id: str, method: str) -> _Link:
        record = self.registry.get(AgentId(agent_id))
        link = self._links.get(agent_id)
        why = None
        if record is None:
            why = f"no agent {agent_id!r} is registered"
            if link is not None and link.last_error:
                why += f" (it could not connect: {link.last_error})"
        elif record.status is AgentStatus.OFFLINE:
            why = f"agent {agent_id!r} is offline"
        elif link is None or not link.connected:
            why = f"agent {agent_id!r} has no live connection"
            if record.endpoint is None and link is None:
                why += " (it registered without an endpoint)"
        if why is not None:
            raise AgentUnavailable(why, agent=agent_id, method=method)
        assert link is not None
        return link

    # -- links -----------------------------------------------------------------------------

    async def _maintain(self, link: _Link) -> None:
        spec = link.spec
        assert spec.connector is not None

        async def connected(peer: Peer) -> None:
            self.registry.register(spec.record(), anyio.current_time())
            link.last_error = None

        def on_event(event: ConnectionEvent) -> None:
            if event.kind == "disconnected" and self.registry.get(AgentId(spec.id)) is not None:
                self.registry.mark_offline(AgentId(spec.id), anyio.current_time())
            if event.error is not None:
                link.last_error = str(event.error)
            if event.kind in ("reconnecting", "gave_up"):
                link.settled.set()  # the first attempt is over, successful or not

        try:
            async with open_reconnecting_peer(
                spec.connector,
                agent=spec.id,
                policy=self._policy,
                config=spec.session_config(),
                handler=self._router,
                on_connect=connected,
                on_event=on_event,
                connect_timeout=self._connect_timeout,
            ) as peer:
                link.peer = peer
                link.settled.set()  # only now can calls be routed to it
                await self._probe(link)
        except MeshError as exc:
            link.last_error = str(exc)
            log.warning("mesh.agent_unreachable", agent=spec.id, error=str(exc))
        finally:
            link.settled.set()

    async def serve_dial_in(self, stream: FrameStream, agent_id: str) -> None:
        """Serve a link an agent dialled in on (its token already said who it is)."""
        from mesh._rpc.connect import handshake

        link = self._links.get(agent_id) or _Link(AgentSpec(agent_id, None, transport="websocket"))
        self._links[agent_id] = link
        spec = link.spec
        async with open_peer(
            stream, handler=self._router, config=spec.session_config(), agent=agent_id
        ) as peer:
            info = await handshake(peer, timeout=self._connect_timeout)
            if info.get("id", agent_id) != agent_id:
                raise AgentUnavailable(
                    f"the token is for {agent_id!r} but the agent says it is {info.get('id')!r}"
                )
            link.peer = peer
            record = spec.record()
            if info:
                record = msgspec.structs.replace(
                    record,
                    name=spec.name or str(info.get("name") or agent_id),
                    capabilities=spec.capabilities or frozenset(info.get("capabilities", ())),
                )
            self.registry.register(record, anyio.current_time())
            link.settled.set()
            try:
                await self._probe(link)
            finally:
                if self.registry.get(AgentId(agent_id)) is not None:
                    self.registry.mark_offline(AgentId(agent_id), anyio.current_time())
                link.peer = None

    async def _probe(self, link: _Link) -> None:
        """Ping every interval; each answer is a heartbeat. Returns once the link is gone."""
        spec = link.spec
        agent_id = AgentId(spec.id)
        peer = link.peer
        assert peer is not None
        while not peer.closed:
            with anyio.move_on_after(spec.heartbeat_interval):
                await _wait_closed(peer)
                return
            if not link.connected or self.registry.get(agent_id) is None:
                continue
            try:
                await peer.call("ping", timeout=spec.heartbeat_interval, **_no_wait(peer))
            except MeshError:
                continue  # no beat: the registry's clock takes it stale, then offline
            if self.registry.get(agent_id) is not None:
                self.registry.heartbeat(agent_id, anyio.current_time())

    # -- introspection -------------------------------------------------------------------

    def agents(self) -> list[AgentRecord]:
        return self.registry.list()

    def has_link(self, agent_id: str) -> bool:
        return agent_id in self._links

    def link_error(self, agent_id: str) -> str | None:
        link = self._links.get(agent_id)
        return None if link is None else link.last_error


def _no_wait(peer: ReconnectingPeer | Peer) -> dict[str, Any]:
    return {"wait_for_connection": False} if isinstance(peer, ReconnectingPeer) else {}


async def _wait_closed(peer: ReconnectingPeer | Peer) -> None:
    if isinstance(peer, Peer):
        await peer.wait_closed()
    else:
        await anyio.sleep(math.inf)  # a reconnecting peer is closed only by its owner


class _Router:
    """What the orchestrator serves on every link: agent-to-agent calls."""

    def __init__(self, orchestrator: MeshOrchestrator) -> None:
        self._orchestrator = orchestrator

    async def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        if method != "mesh/call":
            raise MethodNotFound(f"the mesh serves 'mesh/call', not {method!r}")
        try:
            route = msgspec.convert(params, _RouteParams)
        except msgspec.ValidationError as exc:
            raise InvalidParams(f"invalid mesh/call params: {exc}") from None
        log.debug("mesh.route", to=route.agent, method=route.method)
        return await self._orchestrator.call(
            route.agent, route.method, route.params, timeout=route.timeout
        )

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        log.debug("mesh.notification", method=method)


@asynccontextmanager
async def _serve_locally(agent: Agent) -> AsyncIterator[FrameStream]:
    ours, theirs = memory_stream_pair()
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.serve, theirs)
        try:
            yield ours
        finally:
            await theirs.aclose()
            tg.cancel_scope.cancel()


def local_connector(agent: Agent) -> Connector:
    """A connector that serves ``agent`` in this process over the memory transport."""
    return lambda: _serve_locally(agent)
