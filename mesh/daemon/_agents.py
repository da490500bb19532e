"""The agent routes: list, show, watch, and register / heartbeat / delete over HTTP.

Ids have owners. An id a manifest defines belongs to the operator: it cannot be
registered, heart-beaten or deleted over HTTP (409). An id registered over HTTP
belongs to the identity that registered it: only it or an admin may update,
heartbeat or delete it (403 for anyone else). An id held by a dial-in
connection without a manifest is the connection's (409). What a registration
may say is bounded (the id rule, the heartbeat floor, metadata size, how many
each identity holds, where its endpoint points), each refusal naming its limit.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Final, Literal
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import anyio
import anyio.lowlevel
import msgspec

from mesh._input import whole_number
from mesh._logging import get_logger
from mesh._orchestrator.spec import AgentSpec
from mesh._orchestrator.table import LinkTable
from mesh._orchestrator.view import AgentView, LinkChanges
from mesh.daemon._auth import Identity
from mesh.daemon._limits import check_endpoint, check_id
from mesh.daemon._routes import Params, read_body
from mesh.daemon._settings import DaemonSettings
from mesh.daemon._streams import serve_watcher
from registry import (
    AgentId,
    AgentRecord,
    ChangeKind,
    InvalidAgentRecord,
    StatusChange,
    SubscriberOverflow,
    UnknownAgent,
)
from transports import (
    CloseCode,
    HttpRequest,
    HttpResponse,
    WebSocketStream,
    open_http_client,
    unwrap_single_error,
)

__all__ = ["AgentRoutes", "describe", "shown_endpoint"]

log = get_logger("mesh.daemon")

#: Fixed bounds on a registration's smaller fields (the configurable ones are settings).
MAX_NAME: Final = 128
MAX_CAPABILITIES: Final = 64
#: Agents in one answer of ``GET /agents``, at most and by default.
AGENTS_PAGE: Final = 1000
#: An ``after`` cursor is an agent id: ids are far shorter (check_id bounds them).
MAX_AFTER: Final = 1024
_Capability = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]


class RegisterBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: str
    name: Annotated[str, msgspec.Meta(max_length=MAX_NAME)] = ""
    endpoint: str | None = None
    #: Only HTTP: the registry must not be told a transport the daemon does not use.
    transport: Literal["http"] = "http"
    capabilities: Annotated[list[_Capability], msgspec.Meta(max_length=MAX_CAPABILITIES)] = []
    heartbeat_interval: float = 10.0
    heartbeat_ttl: float = 0.0
    metadata: dict[str, Any] = {}
    #: For the mesh to call the agent's endpoint with (never echoed back or logged).
    token: str | None = None


def _standing(shown: dict[str, Any]) -> tuple[str, str | None]:
    return shown["status"], shown.get("link_error")


def describe(
    record: AgentRecord,
    now: float,
    link_error: str | None = None,
    *,
    status: str | None = None,
    registered: bool = True,
) -> dict[str, Any]:
    """An agent as the API shows it (times as seconds ago: the registry's clock is monotonic).

    An agent the registry does not hold (configured, not connected) has no times.
    """
    endpoint = shown_endpoint(record.endpoint)
    shown: dict[str, Any] = {
        "id": record.id,
        "name": record.name,
        "transport": record.transport,
        "endpoint": endpoint,
        "status": status or str(record.status),
        "capabilities": sorted(record.capabilities),
        "last_seen_ago": round(max(0.0, now - record.last_seen), 3) if registered else None,
        "registered_ago": round(max(0.0, now - record.registered_at), 3) if registered else None,
        "heartbeat_interval": record.heartbeat_interval,
        "heartbeat_ttl": record.heartbeat_ttl,
    }
    if link_error:
        if record.endpoint and endpoint:  # errors quote the URL they failed on
            link_error = link_error.replace(record.endpoint, endpoint)
        shown["link_error"] = link_error
    return shown


def page_of_ids(ids: Iterable[str], limit: int, after: str | None) -> tuple[list[str], bool]:
    """The first ``limit`` of ``ids`` in order after ``after``, and whether more follow.

    One pass that keeps ``limit + 1`` of them (a heap), not a sort of them all.
    """
    chosen = heapq.nsmallest(limit + 1, ids if after is None else (i for i in ids if i > after))
    return chosen[:limit], len(chosen) > limit


def shown_endpoint(url: str | None) -> str | None:
    """``url`` as the API shows it: no user-info, no fragment, and every query value hidden.

    A manifest may point at a server whose key rides in the URL (``?api_key=…``), and
    whoever may read the agents list is not meant to read the key.
    """
    if not url:
        return url
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(a URL that does not parse)"
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{port}" if port is not None else host
    query = "&".join(f"{key}=…" for key, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def describe_view(view: AgentView, now: float) -> dict[str, Any]:
    shown = describe(
        view.record, now, view.link_error, status=view.status, registered=view.registered
    )
    if view.protocol is not None:
        shown["protocol"] = view.protocol
    return shown


class AgentRoutes:
    def __init__(
        self,
        links: LinkTable,
        settings: DaemonSettings,
        manifest_ids: frozenset[str],
        token_for: Callable[[str], bool] = lambda agent_id: False,
    ) -> None:
        self._links = links
        self._settings = settings
        self.manifest_ids = manifest_ids
        #: Whether an agent token is issued for an id: that id dials in, and is kept for it.
        self._token_for = token_for
        #: Ids registered over HTTP, and the identity (Identity.owner) each belongs to.
        self.owners: dict[str, str] = {}
        self._held: Counter[str] = Counter()
        #: In a cluster (``mesh serve --nats``): the daemon that holds an agent.
        self.holder: Callable[[str], str] | None = None
        links.registry.add_listener(self._on_change)

    # -- reading --------------------------------------------------------------------

    async def handle_agents(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        """A page of agents in the order of their ids: ``?limit=`` (1 to 1000, 1000 by
        default) and ``?after=`` the last page's ``next``, which is null on the last page.

        A registry mirrored from a cluster can hold 100,000 agents: described at once
        they take the daemon's loop for the better part of a second and answer 20 MB,
        so no request asks for more than a page, and only the page is described.
        """
        limit = whole_number(request.query_value("limit") or str(AGENTS_PAGE), digits=4)
        if limit is None or not 1 <= limit <= AGENTS_PAGE:
            return HttpResponse.error(400, f"limit must be a whole number from 1 to {AGENTS_PAGE}")
        after = request.query_value("after")
        if after is not None and not 0 < len(after) <= MAX_AFTER:
            return HttpResponse.error(400, "after must be a listing's next (an agent id)")
        page, more = page_of_ids(self._ids(), limit, after)
        now, agents = anyio.current_time(), []
        for agent_id in page:
            view = self._links.view(agent_id)
            if view is not None:
                agents.append(self._with_holder(describe_view(view, now)))
        return HttpResponse.json(200, {"agents": agents, "next": page[-1] if more else None})

    def _ids(self) -> list[str]:
        """Every agent registered, and every configured one that is not (yet)."""
        registered = self._links.registry.ids()
        held = set(registered)
        return [*registered, *(a for a in self._links.linked_agents() if a not in held)]

    def _with_holder(self, shown: dict[str, Any]) -> dict[str, Any]:
        """In a cluster (``mesh serve --nats``), which daemon holds the agent."""
        if self.holder is not None:
            shown["daemon"] = self.holder(shown["id"])
        return shown

    async def handle_agent(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        view = self._links.view(p["id"])
        if view is None:
            return HttpResponse.error(404, f"no agent {p['id']!r} is configured or registered")
        return HttpResponse.json(200, self._with_holder(describe_view(view, anyio.current_time())))

    async def watch_agents(self, stream: WebSocketStream, who: Identity, _: Params) -> None:
        """Send every agent as it is now, then each change of status, until the watcher leaves.

        Subscribed before the snapshot is taken, so no change falls between the two.
        The watcher's socket is read all along, so its pongs keep the link alive.
        """
        await serve_watcher(stream, lambda: self._send_agent_changes(stream))

    async def _send_snapshot(self, stream: WebSocketStream) -> dict[str, tuple[str, str | None]]:
        """Every agent, a page (``AGENTS_PAGE``) to a frame, each page described as it is
        sent: the daemon serves others between two pages. ``more`` is false on the last.
        Returns each agent as the watcher saw it: (status, link error)."""
        seen: dict[str, tuple[str, str | None]] = {}
        ids = self._ids()
        for start in range(0, max(len(ids), 1), AGENTS_PAGE):
            now, agents = anyio.current_time(), []
            for agent_id in ids[start : start + AGENTS_PAGE]:
                view = self._links.view(agent_id)
                if view is not None:  # not gone since the ids were read
                    shown = self._with_holder(describe_view(view, now))
                    agents.append(shown)
                    seen[agent_id] = _standing(shown)
            more = start + AGENTS_PAGE < len(ids)
            frame = {"type": "snapshot", "agents": agents, "more": more}
            await stream.send(msgspec.json.encode(frame))
            # A send the socket takes at once does not yield: let the others in here.
            await anyio.lowlevel.checkpoint()
        return seen

    async def _send_agent_changes(self, stream: WebSocketStream) -> None:
        registry = self._links.registry
        try:
            with self._links.watch_links() as links, unwrap_single_error():
                async with registry.subscribe() as changes:
                    seen = await self._send_snapshot(stream)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._send_link_changes, stream, links, seen)
                        async for change in changes:
                            link_error = self._links.link_error(change.agent_id)
                            shown = self._with_holder(
                                describe(change.record, anyio.current_time(), link_error)
                            )
                            seen[change.agent_id] = _standing(shown)
                            event = {"type": str(change.kind), "old": change.old, "agent": shown}
                            await stream.send(msgspec.json.encode(event))
        except SubscriberOverflow:
            await stream.aclose(CloseCode.FELL_BEHIND, "fell behind the registry's changes")

    async def _send_link_changes(
        self,
        stream: WebSocketStream,
        links: LinkChanges,
        seen: dict[str, tuple[str, str | None]],
    ) -> None:
        """A ``link`` event for an agent the registry does not hold whose link changed.

        A link that gives up before its agent ever connected (``connecting`` →
        ``offline``), or fails again with another error, changes nothing in the
        registry; without these a watcher would show it ``connecting`` for ever.
        """
        while True:
            for agent_id in await links.next():
                view = self._links.view(agent_id)
                if view is None or view.registered:
                    continue  # gone, or the registry's own changes tell it
                shown = self._with_holder(describe_view(view, anyio.current_time()))
                old = seen.get(agent_id)
                if old == _standing(shown):
                    continue
                seen[agent_id] = _standing(shown)
                event = {"type": "link", "old": old[0] if old else None, "agent": shown}
                await stream.send(msgspec.json.encode(event))

    # -- owned ids --------------------------------------------------------------------

    def _may_change(self, agent_id: str, who: Identity) -> HttpResponse | None:
        """None if ``who`` may change ``agent_id`` over HTTP; else the 409 or 403 saying why."""
        if agent_id in self.manifest_ids:
            return HttpResponse.error(
                409,
                f"agent {agent_id!r} is defined by a manifest; it cannot be registered, "
                "heart-beaten or deleted over HTTP",
            )
        owner = self.owners.get(agent_id)
        if owner is None:
            known = self._links.has_link(agent_id) or self._links.registry.get(AgentId(agent_id))
            if known:
                return HttpResponse.error(
                    409, f"agent {agent_id!r} is held by its own connection, not over HTTP"
                )
            if self._token_for(agent_id) and not who.admin:
                # Taken first, the id would turn the agent away when it dials in (and,
                # with an endpoint, send its callers elsewhere).
                return HttpResponse.error(
                    409,
                    f"agent {agent_id!r} has an agent token: it dials in at /ws with it, "
                    "and its id cannot be registered over HTTP",
                )
            return None
        if not who.owns(owner):
            return HttpResponse.error(
                403,
                f"agent {agent_id!r} was registered by another identity; only it or an admin "
                "may change it",
                missing="ownership",
            )
        return None

    def _on_change(self, change: StatusChange) -> None:
        # An endpoint-less registration that expired is gone for good: so is its ownership.
        agent_id = change.agent_id
        if change.kind is ChangeKind.REMOVED and not self._links.has_link(agent_id):
            self._release(agent_id)

    def _release(self, agent_id: str) -> None:
        owner = self.owners.pop(agent_id, None)
        if owner is not None:
            self._held[owner] -= 1
            if self._held[owner] <= 0:
                del self._held[owner]

    # -- changing -----------------------------------------------------------------------

    async def handle_register(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        body = read_body(request, RegisterBody, "registration")
        refused = self._check(body, who) or self._may_change(body.id, who)
        if refused is not None:
            return refused
        known = body.id in self.owners
        if known:
            await self._links.remove_agent(body.id)  # a new endpoint or token needs a new link
        record = {
            "id": body.id,
            "name": body.name or body.id,
            "transport": body.transport,
            "endpoint": body.endpoint,
            "capabilities": body.capabilities,
            "metadata": body.metadata,
            "heartbeat_interval": body.heartbeat_interval,
            "heartbeat_ttl": body.heartbeat_ttl,
        }
        try:
            stored = self._links.registry.register(record, anyio.current_time())
        except (InvalidAgentRecord, msgspec.ValidationError, ValueError) as exc:
            self._release(body.id)
            return HttpResponse.error(400, f"invalid registration: {exc}")
        if not known:
            self.owners[body.id] = who.owner
            self._held[who.owner] += 1
        if body.endpoint is not None:
            self._link(body, stored)
        return HttpResponse.json(
            200 if known else 201, self._with_holder(describe(stored, anyio.current_time()))
        )

    def _check(self, body: RegisterBody, who: Identity) -> HttpResponse | None:
        settings = self._settings
        if (why := check_id(body.id)) is not None:
            return HttpResponse.error(400, f"invalid registration: {why}")
        if body.heartbeat_interval < settings.min_heartbeat_interval:
            return HttpResponse.error(
                400,
                f"heartbeat_interval {body.heartbeat_interval:g} s is below the daemon's floor "
                f"of {settings.min_heartbeat_interval:g} s (min_heartbeat_interval)",
                limit="min_heartbeat_interval",
            )
        size = len(msgspec.json.encode(body.metadata))
        if size > settings.max_metadata_size:
            return HttpResponse.error(
                413,
                f"metadata of {size} bytes exceeds the {settings.max_metadata_size}-byte limit "
                "(max_metadata_size)",
                limit="max_metadata_size",
            )
        if body.endpoint is not None:
            why = check_endpoint(body.endpoint, settings.endpoint_hosts)
            if why is not None:
                return HttpResponse.error(400, f"invalid registration: {why} - at `$.endpoint`")
        held = self._held[who.owner]
        limit = settings.max_registrations_per_identity
        if body.id not in self.owners and held >= limit:
            return HttpResponse.error(
                429,
                f"this identity already holds {held} registrations, the limit "
                f"(max_registrations_per_identity = {limit}); delete some first",
                limit="max_registrations_per_identity",
            )
        return None

    def _link(self, body: RegisterBody, stored: AgentRecord) -> None:
        endpoint, token = body.endpoint, body.token
        assert endpoint is not None
        self._links.add_agent(
            AgentSpec(
                body.id,
                lambda: open_http_client(endpoint, token=token),
                name=stored.name,
                transport="http",
                endpoint=endpoint,
                capabilities=stored.capabilities,
                heartbeat_interval=stored.heartbeat_interval,
                heartbeat_ttl=stored.heartbeat_ttl,
            )
        )

    async def handle_heartbeat(
        self, request: HttpRequest, who: Identity, p: Params
    ) -> HttpResponse:
        agent_id = p["id"]
        if agent_id not in self.owners and agent_id not in self.manifest_ids:
            known = self._links.registry.get(AgentId(agent_id)) is not None
            if not known:
                return HttpResponse.error(
                    404, f"no agent {agent_id!r} is registered; POST /agents/register first"
                )
        refused = self._may_change(agent_id, who)
        if refused is not None:
            return refused
        try:
            self._links.registry.heartbeat(AgentId(agent_id), anyio.current_time())
        except UnknownAgent:
            return HttpResponse.error(
                404, f"no agent {agent_id!r} is registered; POST /agents/register first"
            )
        record = self._links.registry.get(AgentId(agent_id))
        assert record is not None
        return HttpResponse.json(200, {"id": agent_id, "status": str(record.status)})

    async def handle_deregister(
        self, request: HttpRequest, who: Identity, p: Params
    ) -> HttpResponse:
        agent_id = p["id"]
        if agent_id not in self.owners and self._links.registry.get(AgentId(agent_id)) is None:
            return HttpResponse.error(404, f"no agent {agent_id!r} is registered")
        refused = self._may_change(agent_id, who)
        if refused is not None:
            return refused
        await self._links.remove_agent(agent_id)
        self._release(agent_id)
        return HttpResponse(204)
