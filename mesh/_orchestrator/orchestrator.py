"""The MeshOrchestrator: every agent, one registry, one way to call them.

Each agent is a *link*: a connector (stdio, HTTP, WebSocket, in-memory) kept up by
:func:`~mesh.open_reconnecting_peer`, or a connection the agent dialled in on.
The registry is kept truthful from the links: a connected agent is registered,
each answered ``ping`` probe is a heartbeat (so a frozen agent goes stale, then
offline, within its TTL), and a lost link marks it offline at once.

Calls go through :meth:`MeshOrchestrator.call`; an agent the registry does not
know, or knows offline, fails at once with :class:`~mesh.AgentUnavailable`.
Every call passes one door first (:meth:`MeshOrchestrator.authorize`): who it is
made for (``on_behalf_of``: nobody unless said, and a call for nobody is
refused) against the reserved
methods, the access sections and the longest deadline it may give
(``max_call_timeout``), before any link is touched. Agents
reach each other through the ``mesh/call`` method the orchestrator serves on
every link, with the deadline carried along.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final, Protocol, Self, Unpack

import anyio
import anyio.abc
import msgspec

from mesh._errors import AgentUnavailable, MeshError, Unauthorized
from mesh._logging import get_logger
from mesh._orchestrator.access import (
    EMBEDDER,
    NOBODY,
    Principal,
    authorize,
    check_deadline,
    check_named,
    check_relayable,
)
from mesh._orchestrator.bound import DEFAULT_BROADCAST_TIMEOUT, BoundCaller
from mesh._orchestrator.links import ManifestLinks, links_from_manifests
from mesh._orchestrator.liveness import fail_calls_when_offline, probe
from mesh._orchestrator.observe import (
    call_done,
    call_failed,
    call_started,
    count_status_change,
    link_counts,
    observe_call,
)
from mesh._orchestrator.router import Router
from mesh._orchestrator.spec import AgentSpec, Outcome
from mesh._orchestrator.view import AgentView, Link, LinkChanges, note_attempt, view, views
from mesh._rpc.asks import AskHandlers
from mesh._rpc.caller import Caller, ProgressCallback
from mesh._rpc.connect import handshake
from mesh._rpc.peer import Peer, open_peer
from mesh._rpc.reconnect import ConnectionEvent, ReconnectPolicy, open_reconnecting_peer
from mesh._telemetry.metrics import METRICS
from mesh._telemetry.tracing import active as tracing_active
from mesh._telemetry.tracing import tool_of
from mesh.manifests._types import DEFAULT_ACCESS, AccessSection
from registry import (
    AgentId,
    AgentRecord,
    AgentStatus,
    Registry,
    StatusChange,
    run_expiry,
)
from transports import DEFAULT_MAX_FRAME_SIZE, FrameStream, TokenAuthenticator, unwrap_single_error

__all__ = ["MeshOrchestrator", "RemoteAgents"]

log = get_logger("mesh.orchestrator")

#: Closing every link at shutdown (stdio children included) gets this long in total.
CLOSE_LINKS_TIMEOUT: Final = 10.0
#: A dial-in connection that another took over gets at most this long to finish
#: the calls it has in flight before it is closed.
TAKEOVER_DRAIN_TIMEOUT: Final = 30.0


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

#: Agent processes started at once (each start up to its handshake): a Python agent
#: takes a core for a second or so to start, and twenty started together on a loaded
#: two-core machine each missed the connect timeout, were killed, and started again.
SPAWNS_AT_ONCE: Final = max(4, os.cpu_count() or 1)


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
        max_call_timeout: float | None = None,
    ) -> None:
        """``max_call_timeout``: the longest deadline, in seconds, a call made for anyone
        but the embedder may give (None: no bound), or an agent's own ``call_timeout``
        where that is longer; see :meth:`authorize`."""
        self.max_call_timeout = max_call_timeout
        # `is not None`: an empty Registry is falsy (it has a length), and a caller's
        # empty registry must be the one used, not silently replaced.
        self.registry = registry if registry is not None else Registry()
        # The orchestrator checks the registry before each call, so a call that
        # finds its link down between two redials fails at once, never waits.
        self._policy = dataclasses.replace(policy or ReconnectPolicy(), wait_for_connection=False)
        self._connect_timeout = connect_timeout
        self._links: dict[str, Link] = {}
        #: Agents that can never connect (a token variable unset), and why.
        self._unusable: dict[str, str] = {}
        self._pending_specs = list(specs)
        self._tasks: anyio.abc.TaskGroup | None = None
        self._spawns: anyio.CapacityLimiter | None = None  # made in the event loop
        self._linked: anyio.Event | None = None  # likewise
        self._router = Router(self)
        self._link_watchers: set[LinkChanges] = set()
        self._tools_listeners: set[Callable[[str], None]] = set()
        self._notice_listeners: set[Callable[[str, str, Any], None]] = set()
        #: What :meth:`from_manifests` could not use (each also logged), in file order.
        self.manifest_errors: list[MeshError] = []
        #: The tokens agents that dial in must present (filled by :meth:`from_manifests`).
        self.dial_in_tokens = TokenAuthenticator()
        #: Agents held by other daemons (set by ``mesh.cluster`` while it runs).
        self.remote: RemoteAgents | None = None

    @classmethod
    def from_manifests(
        cls,
        directory: str | os.PathLike[str],
        *,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Self:
        """Link every agent ``directory``'s manifests describe (see :func:`links_from_manifests`).

        Broken manifests are skipped, logged and kept in ``manifest_errors``; the
        tokens of agents that dial in go to ``dial_in_tokens``. ``kwargs`` go to
        the constructor.
        """
        return cls.from_links(links_from_manifests(directory, environ=environ), **kwargs)

    @classmethod
    def from_links(cls, links: ManifestLinks, **kwargs: Any) -> Self:
        """Link what :func:`links_from_manifests` loaded, keeping why an agent cannot connect.

        For a caller that needs ``links`` itself (the daemon's identities take its dial-in tokens).
        """
        orchestrator = cls(links.specs, **kwargs)
        orchestrator._unusable.update(links.unusable)
        orchestrator.manifest_errors.extend(links.errors)
        orchestrator.dial_in_tokens = links.tokens
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
                self._spawns = anyio.CapacityLimiter(SPAWNS_AT_ONCE)
                self.registry.add_listener(self._on_status_change)
                await tg.start(run_expiry, self.registry)
                for spec in self._pending_specs:
                    self.add_agent(spec)
                self._pending_specs.clear()
                self._linked_event().set()
                # Give every agent its first chance to connect, bounded.
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
        link = self._links.pop(agent_id, None)
        if link is not None:
            if link.peer is not None:
                await link.peer.aclose()
            link.scope.cancel()
        if self.registry.get(AgentId(agent_id)) is not None:
            self.registry.deregister(AgentId(agent_id), anyio.current_time())

    # -- calling ----------------------------------------------------------------------

    async def call(
        self,
        agent: str,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        on_behalf_of: Principal = NOBODY,
        **asks: Unpack[AskHandlers],
    ) -> Any:
        """Call ``method`` on ``agent``. Unknown or offline agents fail at once.

        ``on_behalf_of``: who the call is made for; a call it may not make raises
        :class:`~mesh.Forbidden` (see :meth:`authorize`). ``on_log``, ``on_elicit`` and
        ``on_sample`` hear the agent's logs and answer its asks (see :mod:`mesh._rpc.asks`).
        """
        if tracing_active():  # the same, inside a CLIENT span
            with observe_call(agent, method, self.knows, tool_of(method, params)):
                caller = self._caller(agent, method, on_behalf_of, timeout)
                return await caller.call(
                    method, params, timeout=timeout, on_progress=on_progress, **asks
                )
        # Metrics only: no object, no context manager (this path is measured per call).
        started = call_started()
        try:
            caller = self._caller(agent, method, on_behalf_of, timeout)
            result = await caller.call(
                method, params, timeout=timeout, on_progress=on_progress, **asks
            )
        except BaseException as exc:
            call_failed(agent, method, exc, started, self.knows)
            raise
        call_done(agent, method, started)
        return result

    async def call_tool(
        self,
        agent: str,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        on_behalf_of: Principal = NOBODY,
        **asks: Unpack[AskHandlers],
    ) -> Any:
        """Call one of an agent's tools: ``await mesh.call_tool("a", "echo", {"message": "hi"})``.

        ``arguments`` go to the tool as they are (a tool argument may be named
        ``timeout``); ``timeout`` and ``on_progress`` are the call's own.
        """
        # Through `call`, as every call is: the one place calls are checked and observed.
        params = {"name": name, "arguments": dict(arguments or {})}
        return await self.call(
            agent,
            "tools/call",
            params,
            timeout=timeout,
            on_progress=on_progress,
            on_behalf_of=on_behalf_of,
            **asks,
        )

    async def list_tools(
        self, agent: str, *, timeout: float | None = None, on_behalf_of: Principal = NOBODY
    ) -> list[dict[str, Any]]:
        """``agent``'s tools: name, description and JSON Schema of the arguments."""
        result = await self.call(agent, "tools/list", timeout=timeout, on_behalf_of=on_behalf_of)
        return list(result["tools"])

    async def ping(
        self, agent: str, *, timeout: float | None = None, on_behalf_of: Principal = NOBODY
    ) -> float:
        """Round-trip a ``ping`` to ``agent``; returns the seconds it took."""
        started = anyio.current_time()
        await self.call(agent, "ping", timeout=timeout, on_behalf_of=on_behalf_of)
        return anyio.current_time() - started

    async def broadcast(
        self,
        method: str,
        params: Any = None,
        *,
        capability: str | None = None,
        timeout: float = DEFAULT_BROADCAST_TIMEOUT,
        on_behalf_of: Principal = NOBODY,
    ) -> dict[str, Outcome]:
        """Call every registered agent (with ``capability``, if given); see :meth:`multicast`."""
        targets = [record.id for record in self.registry.find(capability)]
        return await self.multicast(
            targets, method, params, timeout=timeout, on_behalf_of=on_behalf_of
        )

    async def multicast(
        self,
        agent_ids: Iterable[str],
        method: str,
        params: Any = None,
        *,
        timeout: float = DEFAULT_BROADCAST_TIMEOUT,
        on_behalf_of: Principal = NOBODY,
    ) -> dict[str, Outcome]:
        """Call several agents at once; each answers or fails on its own, all by ``timeout``.

        A method ``on_behalf_of`` may send to none (a reserved one), or a ``timeout``
        past its ``max_call_timeout``, raises :class:`~mesh.Forbidden` for the whole;
        an agent it may not call is that agent's outcome.
        """
        ids = list(dict.fromkeys(agent_ids))
        check_named(on_behalf_of, agent="*", method=method)
        if on_behalf_of.kind != "embedder" and on_behalf_of.room is None:
            check_relayable(method, agent="*", via=on_behalf_of.describe())
        check_deadline(on_behalf_of, timeout, self.max_call_timeout, agent="*", method=method)
        METRICS.fanout.observe((), len(ids))
        outcomes: dict[str, Outcome] = {}

        async def one(agent_id: str) -> None:
            try:
                result = await self.call(
                    agent_id, method, params, timeout=timeout, on_behalf_of=on_behalf_of
                )
            except MeshError as exc:
                outcomes[agent_id] = Outcome(agent_id, error=exc)
            else:
                outcomes[agent_id] = Outcome(agent_id, result=result)

        async with anyio.create_task_group() as tg:
            for agent_id in ids:
                tg.start_soon(one, agent_id)
        return {agent_id: outcomes[agent_id] for agent_id in ids}

    def acting_for(self, principal: Principal) -> BoundCaller:
        """A caller bound to ``principal``: what a surface holds, so that every call it
        makes is made for the identity it was built for (see :class:`BoundCaller`)."""
        return BoundCaller(self, principal)

    def as_embedder(self) -> BoundCaller:
        """Your own program's caller: trusted, as it could use its links directly.

        Calls on the orchestrator itself name nobody unless given ``on_behalf_of``,
        and the door refuses them: the embedder is what a program says it is.
        """
        return BoundCaller(self, EMBEDDER)

    def authorize(
        self,
        agent: str,
        method: str,
        *,
        on_behalf_of: Principal = NOBODY,
        timeout: float | None = None,
    ) -> None:
        """The door: raise :class:`~mesh.Forbidden` unless ``on_behalf_of`` may call ``agent``,
        with a deadline of ``timeout`` seconds (None: the agent's own ``call_timeout``).

        Every call runs it first; a surface may also ask it ahead (a room asks it
        for each member at creation, with its turn timeout, and for each person who
        joins; A2A checks a task's deadline with the same rule before it starts one).
        """
        authorize(on_behalf_of, agent, method, self.access_of)
        check_deadline(
            on_behalf_of, timeout, self.deadline_limit(agent), agent=agent, method=method
        )

    def deadline_limit(self, agent: str) -> float | None:
        """The longest deadline a call to ``agent`` may give (None: no bound): ``max_call_timeout``,
        or the agent's own ``call_timeout`` where the operator set it longer. A call that names
        no deadline gets that one, and so does a call another daemon forwards for it."""
        limit = self.max_call_timeout
        own = self.call_timeout_of(agent)
        if limit is None or own is None:
            return limit
        return max(limit, own)

    def _caller(
        self, agent_id: str, method: str, on_behalf_of: Principal, timeout: float | None
    ) -> Caller:
        """The link to call ``agent_id`` on, once the door let the call through.

        AgentUnavailable (saying why) if there is none.
        """
        self.authorize(agent_id, method, on_behalf_of=on_behalf_of, timeout=timeout)
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
        if record is None and link is None:
            raise AgentUnavailable(
                f"no agent {agent_id!r} is registered", agent=agent_id, method=method
            )
        if record is None:
            assert link is not None
            status = link.status()
        else:
            status = str(record.status)
        why = None
        if record is None or record.status is AgentStatus.OFFLINE:
            why = f"agent {agent_id!r} is {status}"
        elif link is None or not link.connected:
            why = f"agent {agent_id!r} has no live connection"
            if record.endpoint is None and link is None:
                why += " (it registered without an endpoint)"
        if why is not None:
            error = link.last_error if link is not None else None
            why += f" (last link error: {error})" if error else ""
            data = {"status": status, "link_error": error}
            raise AgentUnavailable(why, agent=agent_id, method=method, data=data)
        assert link is not None
        return link

    def knows(self, agent_id: str) -> bool:
        """Whether a manifest, a registration or a dial-in names ``agent_id``."""
        return agent_id in self._links or self.registry.get(AgentId(agent_id)) is not None

    # -- links -----------------------------------------------------------------------------

    async def _maintain_until_removed(self, link: Link) -> None:
        # remove_agent cancels the scope: a link still dialling would otherwise
        # keep trying for ever and re-register the agent when it got through.
        with link.scope:
            await self._maintain(link)

    async def _maintain(self, link: Link) -> None:
        spec = link.spec
        assert spec.connector is not None

        async def connected(peer: Peer) -> None:
            if link.ever_connected:
                METRICS.reconnects.add((spec.transport,))
            self.registry.register(spec.record(), anyio.current_time())
            link.last_error = None
            link.ever_connected = True

        def on_event(event: ConnectionEvent) -> None:
            note_attempt(link, event)
            if event.kind == "disconnected" and self.registry.get(AgentId(spec.id)) is not None:
                self.registry.mark_offline(AgentId(spec.id), anyio.current_time())
            if event.error is not None:
                link.last_error = str(event.error)
            link.gave_up = link.gave_up or event.kind == "gave_up"
            if event.kind in ("reconnecting", "gave_up"):
                link.settled.set()  # the first attempt is over, successful or not
                self._link_changed(spec.id)

        try:
            async with open_reconnecting_peer(
                spec.connector,
                agent=spec.id,
                policy=self._policy,
                config=spec.session_config(),
                handler=self._router,
                on_connect=connected,
                on_event=on_event,
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

    async def wait_linked(self) -> None:
        """Until every configured agent has its link: early in entering, before the agents
        that are dialled have connected. From then on :meth:`serve_dial_in` may run."""
        await self._linked_event().wait()

    def _linked_event(self) -> anyio.Event:
        if self._linked is None:
            self._linked = anyio.Event()
        return self._linked

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
            stream, handler=self._router, config=spec.session_config(), agent=agent_id
        ) as peer:
            info = await handshake(peer, timeout=self._connect_timeout)
            if info.get("id", agent_id) != agent_id:
                why = f"the token is for {agent_id!r} but the agent says it is {info.get('id')!r}"
                if refuse is not None:
                    await refuse(why)
                raise Unauthorized(why, agent=agent_id)
            self._take_over(link, peer)
            link.ever_connected = True
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
                await self._serve_until_replaced(link, peer, on_replaced)
            finally:
                if link.peer is peer:  # else a newer connection holds the id: still online
                    if self.registry.get(AgentId(agent_id)) is not None:
                        self.registry.mark_offline(AgentId(agent_id), anyio.current_time())
                    link.peer = None

    def _take_over(self, link: Link, peer: Peer) -> None:
        """Route the agent's calls to ``peer`` from now on; tell the previous one to go."""
        previous = link.peer
        link.peer = peer
        link.replaced[peer] = anyio.Event()
        if isinstance(previous, Peer) and previous in link.replaced:
            log.info("mesh.dial_in_taken_over", agent=link.spec.id)
            link.replaced.pop(previous).set()

    async def _serve_until_replaced(
        self, link: Link, peer: Peer, on_replaced: Callable[[], Awaitable[None]] | None
    ) -> None:
        """Probe ``peer`` until it closes, or until a newer connection takes over."""
        replaced = link.replaced.get(peer) or anyio.Event()

        async def stop_when_replaced(scope: anyio.CancelScope) -> None:
            await replaced.wait()
            scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_when_replaced, tg.cancel_scope)
                await probe(link, self.registry)
                tg.cancel_scope.cancel()
            if replaced.is_set():
                with anyio.move_on_after(min(link.spec.call_timeout, TAKEOVER_DRAIN_TIMEOUT)):
                    await peer.wait_calls_finished()
                if on_replaced is not None:
                    await on_replaced()
        finally:
            link.replaced.pop(peer, None)

    def _on_status_change(self, change: StatusChange) -> None:
        count_status_change(change)
        fail_calls_when_offline(self._links, change)

    # -- introspection -------------------------------------------------------------------

    def agents(self) -> list[AgentRecord]:
        """The registry's agents (see :meth:`views` for every configured one as well)."""
        return self.registry.list()

    def views(self) -> list[AgentView]:
        """Every agent the orchestrator knows, registered or not, with where it stands."""
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

    def add_tools_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(agent)`` whenever an agent says its tools changed."""
        self._tools_listeners.add(listener)

    def remove_tools_listener(self, listener: Callable[[str], None]) -> None:
        self._tools_listeners.discard(listener)

    def tools_changed(self, agent: str) -> None:
        """An agent (a mounted MCP server, say) told us its list of tools changed."""
        log.info("mesh.tools_changed", agent=agent)
        for listener in list(self._tools_listeners):
            listener(agent)

    def add_notice_listener(self, listener: Callable[[str, str, Any], None]) -> None:
        """Call ``listener(agent, method, params)`` whenever an agent says one of its
        resources, or its list of resources or prompts, changed."""
        self._notice_listeners.add(listener)

    def remove_notice_listener(self, listener: Callable[[str, str, Any], None]) -> None:
        self._notice_listeners.discard(listener)

    def agent_notice(self, agent: str, method: str, params: Any) -> None:
        """An agent told us a resource or a list changed (see the router's AGENT_NOTICES)."""
        log.debug("mesh.agent_notice", agent=agent, method=method)
        for listener in list(self._notice_listeners):
            listener(agent, method, params)

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
