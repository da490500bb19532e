"""The links table: every agent's link kept up, and the registry kept truthful from them.

Each agent is a *link*: a connector (stdio, HTTP, WebSocket, in-memory) kept up by
:func:`~mesh.open_reconnecting_peer`, or a connection the agent dialled in on. The
table owns them, and the processes and sockets behind them: a connected agent is
registered, each answered ``ping`` probe is a heartbeat (so a frozen agent goes
stale, then offline, within its TTL), and a lost link marks it offline at once.

It makes no call for anyone: who may call, with what deadline, is the door's
(:mod:`mesh._orchestrator.door`), which is the one holder of :meth:`LinkTable.caller`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Final, Protocol

import anyio
import anyio.abc

from mesh._errors import AgentUnavailable, MeshError, Unauthorized
from mesh._logging import get_logger
from mesh._orchestrator.access import Principal
from mesh._orchestrator.dial_in import dialled_record, serve_until_replaced, take_over
from mesh._orchestrator.links import ManifestLinks
from mesh._orchestrator.liveness import fail_calls_when_offline, probe
from mesh._orchestrator.observe import count_status_change, link_counts
from mesh._orchestrator.spec import AgentSpec
from mesh._orchestrator.view import (
    AgentView,
    Link,
    LinkChanges,
    note_attempt,
    unavailable,
    view,
    views,
)
from mesh._rpc.caller import Caller
from mesh._rpc.connect import handshake
from mesh._rpc.peer import Peer, RequestHandler, open_peer
from mesh._rpc.reconnect import ConnectionEvent, ReconnectPolicy, open_reconnecting_peer
from mesh._telemetry.metrics import METRICS
from mesh.manifests._types import DEFAULT_ACCESS, AccessSection
from registry import AgentId, AgentRecord, AgentStatus, Registry, StatusChange, run_expiry
from transports import DEFAULT_MAX_FRAME_SIZE, FrameStream, TokenAuthenticator, unwrap_single_error

__all__ = ["LinkTable", "RemoteAgents"]

log = get_logger("mesh.orchestrator")

#: Closing every link at shutdown (stdio children included) gets this long in total.
CLOSE_LINKS_TIMEOUT: Final = 10.0
#: Agent processes started at once (each start up to its handshake): a Python agent
#: takes a core for a second or so to start, and twenty started together on a loaded
#: two-core machine each missed the connect timeout, were killed, and started again.
SPAWNS_AT_ONCE: Final = max(4, os.cpu_count() or 1)


class RemoteAgents(Protocol):
    """Agents another daemon holds (``mesh.cluster`` is one), asked for ids with no local link."""

    def caller(self, agent_id: str, method: str, *, on_behalf_of: Principal) -> Caller | None:
        """A Caller for ``agent_id`` if another daemon holds it, else None.

        ``on_behalf_of`` travels with each call, and the holder checks it again.

        Raises :class:`~mesh.AgentUnavailable` when it is held elsewhere but
        cannot be called (offline, or the way there is down).
        """
        ...

    def access_of(self, agent_id: str) -> AccessSection | None:
        """The access section of an agent another daemon holds (None if none does)."""
        ...


Refuse = Callable[[str], Awaitable[None]]


class LinkTable:
    """The agents' links, by id: started, kept up, probed, taken over, closed.

    What a surface that manages agents holds (the daemon's ``/agents`` routes, its
    dial-in route, its probes); a surface that calls them holds the door instead.
    """

    def __init__(
        self,
        specs: Iterable[AgentSpec] = (),
        *,
        registry: Registry | None = None,
        policy: ReconnectPolicy | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        # `is not None`: an empty Registry is falsy (it has a length), and a caller's
        # empty registry must be the one used, not silently replaced.
        self.registry = registry if registry is not None else Registry()
        # The door checks the registry before each call, so a call that finds its
        # link down between two redials fails at once, never waits.
        self._policy = dataclasses.replace(policy or ReconnectPolicy(), wait_for_connection=False)
        self._connect_timeout = connect_timeout
        self._links: dict[str, Link] = {}
        #: Agents that can never connect (a token variable unset), and why.
        self._unusable: dict[str, str] = {}
        self._pending_specs = list(specs)
        self._tasks: anyio.abc.TaskGroup | None = None
        self._spawns: anyio.CapacityLimiter | None = None  # made in the event loop
        self._linked: anyio.Event | None = None  # likewise
        self._link_watchers: set[LinkChanges] = set()
        #: What every link serves to its agent (``mesh/call`` through the door); set by
        #: whoever builds the door, which needs this table first.
        self.handler: RequestHandler | None = None
        #: What :meth:`load` could not use (each also logged), in file order.
        self.manifest_errors: list[MeshError] = []
        #: The tokens agents that dial in must present (filled by :meth:`load`).
        self.dial_in_tokens = TokenAuthenticator()
        #: Agents held by other daemons (set by ``mesh.cluster`` while it runs).
        self.remote: RemoteAgents | None = None

    def load(self, links: ManifestLinks) -> None:
        """Take what :func:`links_from_manifests` loaded, keeping why an agent cannot connect."""
        self._unusable.update(links.unusable)
        self.manifest_errors.extend(links.errors)
        self.dial_in_tokens = links.tokens
        self._pending_specs.extend(links.specs)

    # -- lifetime ----------------------------------------------------------------------

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Start every link, give each its first chance to connect (bounded), and close
        them all (their child processes too) on the way out."""
        with unwrap_single_error():
            async with anyio.create_task_group() as tg:
                self._tasks = tg
                self._spawns = anyio.CapacityLimiter(SPAWNS_AT_ONCE)
                self.registry.add_listener(self._on_status_change)
                await tg.start(run_expiry, self.registry)
                for spec in self._pending_specs:
                    self.add_agent(spec)
                self._pending_specs.clear()
                self._linked_event().set()
                with anyio.move_on_after(self._connect_timeout + 1):
                    for link in list(self._links.values()):
                        await link.settled.wait()
                try:
                    yield
                finally:
                    self.registry.remove_listener(self._on_status_change)
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
        link = self._links[spec.id] = Link(spec, problem=self._unusable.get(spec.id))
        if spec.connector is None:
            link.settled.set()
            return
        if self._tasks is None:
            self._pending_specs.append(spec)
            del self._links[spec.id]
            return
        self._tasks.start_soon(self._maintain_until_removed, link)

    async def remove_agent(self, agent_id: str) -> None:
        """Close the agent's link (its process too) and take it out of the registry."""
        link = self._links.pop(agent_id, None)
        if link is not None:
            if link.peer is not None:
                await link.peer.aclose()
            link.scope.cancel()
        if self.registry.get(AgentId(agent_id)) is not None:
            self.registry.deregister(AgentId(agent_id), anyio.current_time())

    async def wait_linked(self) -> None:
        """Until every configured agent has its link: early in entering, before the agents
        that are dialled have connected. From then on :meth:`serve_dial_in` may run."""
        await self._linked_event().wait()

    def _linked_event(self) -> anyio.Event:
        if self._linked is None:
            self._linked = anyio.Event()
        return self._linked

    # -- keeping a dialled link up --------------------------------------------------------

    async def _maintain_until_removed(self, link: Link) -> None:
        # remove_agent cancels the scope: a link still dialling would otherwise
        # keep trying for ever and re-register the agent when it got through.
        with link.scope:
            await self._maintain(link)

    async def _maintain(self, link: Link) -> None:
        spec = link.spec
        assert spec.connector is not None
        try:
            async with open_reconnecting_peer(
                spec.connector,
                agent=spec.id,
                policy=self._policy,
                config=spec.session_config(),
                handler=self.handler,
                on_connect=self._on_connect(link),
                on_event=self._on_event(link),
                connect_timeout=spec.start_timeout or self._connect_timeout,
                admission=self._spawns if spec.transport == "stdio" else None,
            ) as peer:
                link.peer = peer
                link.settled.set()  # only now can calls be routed to it
                await probe(link, self.registry)
        except MeshError as exc:
            link.last_error = str(exc)
            link.gave_up = True
            log.warning("mesh.agent_unreachable", agent=spec.id, error=str(exc))
            self._link_changed(spec.id)
        finally:
            link.settled.set()

    def _on_connect(self, link: Link) -> Callable[[Peer], Awaitable[None]]:
        """Each connection of a dialled link registers the agent (a reconnect is counted)."""
        spec = link.spec

        async def connected(peer: Peer) -> None:
            if link.ever_connected:
                METRICS.reconnects.add((spec.transport,))
            self.registry.register(spec.record(), anyio.current_time())
            link.last_error = None
            link.ever_connected = True

        return connected

    def _on_event(self, link: Link) -> Callable[[ConnectionEvent], None]:
        """A lost connection marks the agent offline at once; a failed attempt is kept as
        the link's last error, and told to whoever watches the links."""
        agent_id = link.spec.id

        def on_event(event: ConnectionEvent) -> None:
            note_attempt(link, event)
            if event.kind == "disconnected" and self.registry.get(AgentId(agent_id)) is not None:
                self.registry.mark_offline(AgentId(agent_id), anyio.current_time())
            if event.error is not None:
                link.last_error = str(event.error)
            link.gave_up = link.gave_up or event.kind == "gave_up"
            if event.kind in ("reconnecting", "gave_up"):
                link.settled.set()  # the first attempt is over, successful or not
                self._link_changed(agent_id)

        return on_event

    def _on_status_change(self, change: StatusChange) -> None:
        count_status_change(change)
        fail_calls_when_offline(self._links, change)

    # -- links an agent dialled in on -----------------------------------------------------

    async def serve_dial_in(
        self,
        stream: FrameStream,
        agent_id: str,
        *,
        refuse: Refuse | None = None,
        on_replaced: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Serve a link an agent dialled in on (its token already said who it is).

        An agent whose ``agent/info`` names another id is refused: ``refuse(why)``
        runs first, while the link is still open (the daemon closes it with 4003, so
        the agent knows that redialling cannot help), then ``Unauthorized`` is raised.

        A second connection for the same id takes over (a rolling restart): calls
        go to it at once, this one finishes the calls it has in flight (bounded),
        then ``on_replaced`` is awaited (the daemon closes the WebSocket with its
        code) and this returns; the agent stays online throughout.
        """
        link = self._links.get(agent_id) or Link(AgentSpec(agent_id, None, transport="websocket"))
        if link.spec.connector is not None:
            raise AgentUnavailable(
                f"agent {agent_id!r} is linked by the mesh over {link.spec.transport}; "
                "it cannot also dial in"
            )
        self._links[agent_id] = link
        spec = link.spec
        async with open_peer(
            stream, handler=self.handler, config=spec.session_config(), agent=agent_id
        ) as peer:
            info = await handshake(peer, timeout=self._connect_timeout)
            if info.get("id", agent_id) != agent_id:
                why = f"the token is for {agent_id!r} but the agent says it is {info.get('id')!r}"
                if refuse is not None:
                    await refuse(why)
                raise Unauthorized(why, agent=agent_id)
            take_over(link, peer)
            link.ever_connected = True
            self.registry.register(dialled_record(spec, info), anyio.current_time())
            link.settled.set()
            try:
                await serve_until_replaced(link, peer, self.registry, on_replaced)
            finally:
                if link.peer is peer:  # else a newer connection holds the id: still online
                    if self.registry.get(AgentId(agent_id)) is not None:
                        self.registry.mark_offline(AgentId(agent_id), anyio.current_time())
                    link.peer = None

    # -- the one way to a link's caller ---------------------------------------------------

    def caller(self, agent_id: str, method: str, *, on_behalf_of: Principal) -> Caller:
        """The caller of ``agent_id``'s link, or another daemon's way to it.

        For the door alone, after it let the call through: a surface that took a
        caller here would skip every check. AgentUnavailable (saying why) if there is none.
        """
        if self.remote is not None and agent_id not in self._links:
            remote = self.remote.caller(agent_id, method, on_behalf_of=on_behalf_of)
            if remote is not None:
                return remote
        caller = self._available(agent_id, method).peer
        assert caller is not None  # _available checked that it is connected
        return caller

    def _available(self, agent_id: str, method: str) -> Link:
        record = self.registry.get(AgentId(agent_id))
        link = self._links.get(agent_id)
        if (
            record is not None
            and link is not None
            and record.status is not AgentStatus.OFFLINE
            and link.connected
        ):
            return link  # the path of every call: no status text to build
        raise unavailable(agent_id, method, record, link)

    # -- what the table knows ----------------------------------------------------------------

    def knows(self, agent_id: str) -> bool:
        """Whether a manifest, a registration or a dial-in names ``agent_id``."""
        return agent_id in self._links or self.registry.get(AgentId(agent_id)) is not None

    def agents(self) -> list[AgentRecord]:
        """The registry's agents (see :meth:`views` for every configured one as well)."""
        return self.registry.list()

    def views(self) -> list[AgentView]:
        """Every agent the table knows, registered or not, with where it stands."""
        return views(self.registry, self._links)

    def view(self, agent_id: str) -> AgentView | None:
        """One agent as :meth:`views` shows it; None for an id nobody configured or registered."""
        return view(self.registry, self._links, agent_id)

    @contextmanager
    def watch_links(self) -> Iterator[LinkChanges]:
        """Which agents' links changed while the block runs (``await changes.next()``).

        The registry's changes (``registry.subscribe()``) say when an agent comes
        online, goes stale or offline; a link that is still trying, or has given
        up, before the registry ever held the agent, is told only here. Read the
        agent as it is now with :meth:`view`.
        """
        changes = LinkChanges()
        self._link_watchers.add(changes)
        try:
            yield changes
        finally:
            self._link_watchers.discard(changes)

    def _link_changed(self, agent_id: str) -> None:
        for changes in self._link_watchers:
            changes.add(agent_id)

    def link_counts(self) -> dict[tuple[str, str], int]:
        """Links by (transport, status), for ``/metrics``."""
        return link_counts(self._links)

    def has_link(self, agent_id: str) -> bool:
        return agent_id in self._links

    def linked_agents(self) -> list[str]:
        """Every agent linked or awaited (dial-in), registered or not; in the order added."""
        return [*self._links, *(spec.id for spec in self._pending_specs)]

    def call_timeout_of(self, agent_id: str) -> float | None:
        """The deadline calls to a linked agent get unless they name one (None if not linked)."""
        link = self._links.get(agent_id)
        return None if link is None else link.spec.call_timeout

    def largest_frame_size(self) -> int:
        """The largest ``max_frame_size`` of the linked agents (the default if none is):
        what a result relayed from any of them may need."""
        sizes = [link.spec.max_frame_size for link in self._links.values()]
        return max(sizes, default=DEFAULT_MAX_FRAME_SIZE)

    def access_of(self, agent: str) -> AccessSection:
        """Who may call ``agent`` and whom it may call (the default for an unknown id).

        For an agent another daemon holds, the access section its holder published.
        """
        link = self._links.get(agent)
        if link is not None:
            return link.spec.access
        remote = self.remote.access_of(agent) if self.remote is not None else None
        return remote if remote is not None else DEFAULT_ACCESS

    def link_error(self, agent_id: str) -> str | None:
        link = self._links.get(agent_id)
        return None if link is None else link.last_error
