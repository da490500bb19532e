"""The MeshOrchestrator: every agent, one registry, one way to call them.

It is two objects, composed: the links table (:class:`~mesh._orchestrator.table.LinkTable`:
links kept up, the registry kept truthful from them, dial-in takeover) and the door
(:class:`~mesh._orchestrator.door.Door`: every call, made for someone and checked
once, then sent on the link the table hands over). A program that embeds the mesh
holds the orchestrator; each surface of the daemon holds the part it uses —
:attr:`MeshOrchestrator.door` to call, :attr:`MeshOrchestrator.links` to manage agents.

Calls go through :meth:`MeshOrchestrator.call`; an agent the registry does not
know, or knows offline, fails at once with :class:`~mesh.AgentUnavailable`.
Every call passes the door first (:meth:`MeshOrchestrator.authorize`): who it is
made for (``on_behalf_of``: nobody unless said, and a call for nobody is
refused) against the reserved methods, the access sections and the longest
deadline it may give (``max_call_timeout``), before any link is touched. Agents
reach each other through the ``mesh/call`` method served on every link, with the
deadline carried along.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, Self, Unpack

from mesh._errors import MeshError
from mesh._orchestrator.access import NOBODY, Principal
from mesh._orchestrator.bound import DEFAULT_BROADCAST_TIMEOUT, BoundCaller
from mesh._orchestrator.door import Door
from mesh._orchestrator.links import ManifestLinks, links_from_manifests
from mesh._orchestrator.router import Notices, Router
from mesh._orchestrator.spec import AgentSpec, Outcome
from mesh._orchestrator.table import LinkTable, Refuse, RemoteAgents
from mesh._orchestrator.view import AgentView, LinkChanges
from mesh._rpc.asks import AskHandlers
from mesh._rpc.caller import ProgressCallback
from mesh._rpc.reconnect import ReconnectPolicy
from mesh.manifests._types import AccessSection
from registry import AgentRecord, Registry
from transports import FrameStream, TokenAuthenticator

__all__ = ["MeshOrchestrator", "RemoteAgents"]


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
        #: The agents' links and the registry kept from them: what a surface that
        #: manages agents holds.
        self.links = LinkTable(
            specs, registry=registry, policy=policy, connect_timeout=connect_timeout
        )
        #: Every call, checked once: what a surface that calls agents holds.
        self.door = Door(self.links, max_call_timeout=max_call_timeout)
        #: What agents say changed of their tools, resources and prompts.
        self.notices = Notices()
        self.links.handler = Router(self.door, self.notices)

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
        orchestrator = cls(**kwargs)
        orchestrator.links.load(links)
        return orchestrator

    # -- what the parts hold ------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        return self.links.registry

    @property
    def max_call_timeout(self) -> float | None:
        return self.door.max_call_timeout

    @max_call_timeout.setter
    def max_call_timeout(self, value: float | None) -> None:
        self.door.max_call_timeout = value

    @property
    def manifest_errors(self) -> list[MeshError]:
        """What :meth:`from_manifests` could not use (each also logged), in file order."""
        return self.links.manifest_errors

    @property
    def dial_in_tokens(self) -> TokenAuthenticator:
        """The tokens agents that dial in must present (filled by :meth:`from_manifests`)."""
        return self.links.dial_in_tokens

    @property
    def remote(self) -> RemoteAgents | None:
        """Agents held by other daemons (set by ``mesh.cluster`` while it runs)."""
        return self.links.remote

    @remote.setter
    def remote(self, value: RemoteAgents | None) -> None:
        self.links.remote = value

    # -- lifetime ----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._stack: AbstractAsyncContextManager[None] = self.links.open()
        await self._stack.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)

    def add_agent(self, spec: AgentSpec) -> None:
        """Start linking an agent (connector-based), or reserve its place (dial-in)."""
        self.links.add_agent(spec)

    async def remove_agent(self, agent_id: str) -> None:
        await self.links.remove_agent(agent_id)

    async def wait_linked(self) -> None:
        """Until every configured agent has its link: early in entering, before the agents
        that are dialled have connected. From then on :meth:`serve_dial_in` may run."""
        await self.links.wait_linked()

    async def serve_dial_in(
        self,
        stream: FrameStream,
        agent_id: str,
        *,
        refuse: Refuse | None = None,
        on_replaced: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Serve a link an agent dialled in on; see :meth:`LinkTable.serve_dial_in`."""
        await self.links.serve_dial_in(stream, agent_id, refuse=refuse, on_replaced=on_replaced)

    # -- calling: the door ------------------------------------------------------------------

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
        return await self.door.call(
            agent,
            method,
            params,
            timeout=timeout,
            on_progress=on_progress,
            on_behalf_of=on_behalf_of,
            **asks,
        )

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
        return await self.door.call_tool(
            agent,
            name,
            arguments,
            timeout=timeout,
            on_progress=on_progress,
            on_behalf_of=on_behalf_of,
            **asks,
        )

    async def list_tools(
        self, agent: str, *, timeout: float | None = None, on_behalf_of: Principal = NOBODY
    ) -> list[dict[str, Any]]:
        """``agent``'s tools: name, description and JSON Schema of the arguments."""
        return await self.door.list_tools(agent, timeout=timeout, on_behalf_of=on_behalf_of)

    async def ping(
        self, agent: str, *, timeout: float | None = None, on_behalf_of: Principal = NOBODY
    ) -> float:
        """Round-trip a ``ping`` to ``agent``; returns the seconds it took."""
        return await self.door.ping(agent, timeout=timeout, on_behalf_of=on_behalf_of)

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
        return await self.door.broadcast(
            method, params, capability=capability, timeout=timeout, on_behalf_of=on_behalf_of
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
        return await self.door.multicast(
            agent_ids, method, params, timeout=timeout, on_behalf_of=on_behalf_of
        )

    def acting_for(self, principal: Principal) -> BoundCaller:
        """A caller bound to ``principal``: what a surface holds, so that every call it
        makes is made for the identity it was built for (see :class:`BoundCaller`)."""
        return self.door.acting_for(principal)

    def as_embedder(self) -> BoundCaller:
        """Your own program's caller: trusted, as it could use its links directly.

        Calls on the orchestrator itself name nobody unless given ``on_behalf_of``,
        and the door refuses them: the embedder is what a program says it is.
        """
        return self.door.as_embedder()

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
        self.door.authorize(agent, method, on_behalf_of=on_behalf_of, timeout=timeout)

    def deadline_limit(self, agent: str) -> float | None:
        """The longest deadline a call to ``agent`` may give (None: no bound); see
        :meth:`Door.deadline_limit`."""
        return self.door.deadline_limit(agent)

    # -- introspection: the links table ----------------------------------------------------

    def knows(self, agent_id: str) -> bool:
        """Whether a manifest, a registration or a dial-in names ``agent_id``."""
        return self.links.knows(agent_id)

    def agents(self) -> list[AgentRecord]:
        """The registry's agents (see :meth:`views` for every configured one as well)."""
        return self.links.agents()

    def views(self) -> list[AgentView]:
        """Every agent the orchestrator knows, registered or not, with where it stands."""
        return self.links.views()

    def view(self, agent_id: str) -> AgentView | None:
        """One agent as :meth:`views` shows it; None for an id nobody configured or registered."""
        return self.links.view(agent_id)

    @contextmanager
    def watch_links(self) -> Iterator[LinkChanges]:
        """Which agents' links changed while the block runs; see :meth:`LinkTable.watch_links`."""
        with self.links.watch_links() as changes:
            yield changes

    def link_counts(self) -> dict[tuple[str, str], int]:
        """Links by (transport, status), for ``/metrics``."""
        return self.links.link_counts()

    def has_link(self, agent_id: str) -> bool:
        return self.links.has_link(agent_id)

    def linked_agents(self) -> list[str]:
        """Every agent linked or awaited (dial-in), registered or not; in the order added."""
        return self.links.linked_agents()

    def call_timeout_of(self, agent_id: str) -> float | None:
        """The deadline calls to a linked agent get unless they name one (None if not linked)."""
        return self.links.call_timeout_of(agent_id)

    def largest_frame_size(self) -> int:
        """The largest ``max_frame_size`` of the linked agents (the default if none is)."""
        return self.links.largest_frame_size()

    def access_of(self, agent: str) -> AccessSection:
        """Who may call ``agent`` and whom it may call (the default for an unknown id)."""
        return self.links.access_of(agent)

    def link_error(self, agent_id: str) -> str | None:
        return self.links.link_error(agent_id)

    # -- agents' notices ------------------------------------------------------------------

    def add_tools_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(agent)`` whenever an agent says its tools changed."""
        self.notices.add_tools_listener(listener)

    def remove_tools_listener(self, listener: Callable[[str], None]) -> None:
        self.notices.remove_tools_listener(listener)

    def tools_changed(self, agent: str) -> None:
        """An agent (a mounted MCP server, say) told us its list of tools changed."""
        self.notices.tools_changed(agent)

    def add_notice_listener(self, listener: Callable[[str, str, Any], None]) -> None:
        """Call ``listener(agent, method, params)`` whenever an agent says one of its
        resources, or its list of resources or prompts, changed."""
        self.notices.add_notice_listener(listener)

    def remove_notice_listener(self, listener: Callable[[str, str, Any], None]) -> None:
        self.notices.remove_notice_listener(listener)

    def agent_notice(self, agent: str, method: str, params: Any) -> None:
        """An agent told us a resource or a list changed (see the router's AGENT_NOTICES)."""
        self.notices.agent_notice(agent, method, params)
