"""Where each agent stands: the registry's word once it has one, the link's before and after.

The registry knows agents that connected (``online``, ``stale``, ``offline``,
until it removes them). An agent configured by a manifest is the orchestrator's
from the first moment, connected or not: before it ever connects it is
``connecting`` (the orchestrator is dialling it) or ``waiting for dial-in``;
a link that can never come up (a token variable unset), gave up, failed
:data:`FAILING_AFTER` attempts in a row before any handshake (a stdio agent's crash loop), or
dropped after the registry forgot the agent is ``offline``. Each comes with the link's
last error, so nobody has to read the log to learn why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import anyio

from mesh._errors import AgentUnavailable
from mesh._orchestrator.spec import AgentSpec
from mesh._rpc.caller import Caller
from mesh._rpc.peer import Peer
from mesh._rpc.reconnect import ConnectionEvent
from mesh._telemetry.metrics import METRICS
from registry import AgentId, AgentRecord, AgentStatus, Registry

__all__ = [
    "CONNECTING",
    "FAILING_AFTER",
    "LINK_STATUSES",
    "OFFLINE",
    "WAITING",
    "AgentView",
    "Link",
    "LinkChanges",
    "note_attempt",
    "unavailable",
    "view",
    "views",
]

#: The orchestrator is dialling the agent and has not reached it yet.
CONNECTING: Final = "connecting"
#: The agent dials in, and has not yet.
WAITING: Final = "waiting for dial-in"
#: It will not connect by itself: it cannot (see its link error), gave up, or left.
OFFLINE: Final = "offline"
#: A stdio link whose last this many attempts in a row failed before any handshake is
#: shown ``offline``: a command that exits at once, a module or binary that does not
#: exist, fails the same way every time, and ``connecting`` would read as a slow start.
#: It is still retried, and shown ``online`` as soon as an attempt succeeds. A network
#: link stays ``connecting``: its server may just not be up yet.
FAILING_AFTER: Final = 3
#: Every status an agent can have, in the order counts are shown.
LINK_STATUSES: Final = ("online", "stale", OFFLINE, CONNECTING, WAITING)


class Link:
    """One agent's connection, whichever side dialled: a Caller either way."""

    def __init__(self, spec: AgentSpec, *, problem: str | None = None) -> None:
        self.spec = spec
        self.peer: Caller | None = None
        #: Why it can never connect (a token variable unset); None if it can.
        self.problem = problem
        self.last_error: str | None = problem
        self.ever_connected = False
        self.gave_up = False
        #: Attempts in a row that ended before a handshake (0 once one succeeds).
        self.failures = 0
        self.settled = anyio.Event()  # first connection attempt finished, either way
        #: Cancelled when the agent is removed, so a link still dialling stops for good.
        self.scope = anyio.CancelScope()
        #: Set when a newer dial-in connection took this agent's id over.
        self.replaced: dict[Peer, anyio.Event] = {}

    @property
    def connected(self) -> bool:
        return self.peer is not None and self.peer.connected

    @property
    def crash_looping(self) -> bool:
        """A process the daemon spawns failed :data:`FAILING_AFTER` times in a row."""
        return self.spec.transport == "stdio" and self.failures >= FAILING_AFTER

    def status(self) -> str:
        """Where the agent stands when the registry has no record of it."""
        if self.problem is not None or self.gave_up or self.crash_looping:
            return OFFLINE
        if self.spec.connector is not None:
            return CONNECTING  # for the first time, or again
        return OFFLINE if self.ever_connected else WAITING


def note_attempt(link: Link, event: ConnectionEvent) -> None:
    """Count what ``event`` says of the link's attempts: each new one is a restart (a
    stdio agent's process spawned again), and one that follows an attempt that never
    reached a handshake counts a failure, in the link and in ``/metrics``."""
    agent = (link.spec.id,)
    if event.kind == "connected":
        link.failures = 0
    elif event.kind == "reconnecting":
        METRICS.agent_restarts.add(agent)
        link.failures = event.attempt - 1  # the attempts since the last handshake, all failed
        if link.failures:
            METRICS.link_failures.add(agent)


class LinkChanges:
    """The agents whose link changed (gave up, or failed anew) since the watcher last looked.

    Ids are coalesced: a watcher that reads late reads each id once and then sees
    the link as it is now, so however often a link retries, a watcher costs at
    most one entry per agent. What the registry holds is told by its own changes;
    these are for what only the link knows.
    """

    def __init__(self) -> None:
        self._ids: dict[str, None] = {}
        self._ready = anyio.Event()

    def add(self, agent_id: str) -> None:
        self._ids[agent_id] = None
        self._ready.set()

    async def next(self) -> list[str]:
        """Until some link changed; then every id that did, in the order they first changed."""
        await self._ready.wait()
        self._ready = anyio.Event()
        changed, self._ids = list(self._ids), {}
        return changed


@dataclass(frozen=True, slots=True)
class AgentView:
    """One agent as shown: its record (the registry's, else its spec's), status, last error."""

    record: AgentRecord
    status: str
    link_error: str | None
    registered: bool
    #: What a link configured here speaks (``mesh``, ``mcp``, ``a2a``); None for an agent
    #: known only from the registry (another daemon's, or one registered over HTTP).
    protocol: str | None = None


def views(registry: Registry, links: Mapping[str, Link]) -> list[AgentView]:
    """Every agent: the registry's, then the configured ones it does not hold."""
    registered = registry.list()
    shown = [_registered(record, links.get(record.id)) for record in registered]
    held = {record.id for record in registered}
    shown.extend(_unregistered(link) for agent_id, link in links.items() if agent_id not in held)
    return shown


def view(registry: Registry, links: Mapping[str, Link], agent_id: str) -> AgentView | None:
    """One agent as :func:`views` shows it; None for an id nobody configured or registered."""
    record = registry.get(AgentId(agent_id))
    link = links.get(agent_id)
    if record is not None:
        return _registered(record, link)
    return None if link is None else _unregistered(link)


def _registered(record: AgentRecord, link: Link | None) -> AgentView:
    error = link.last_error if link is not None else None
    protocol = link.spec.protocol if link is not None else None
    return AgentView(record, str(record.status), error, registered=True, protocol=protocol)


def _unregistered(link: Link) -> AgentView:
    error = link.last_error
    if link.crash_looping and not link.connected:
        error = f"{link.failures} attempts in a row failed (retrying); the last: {error}"
    record, status = link.spec.record(), link.status()
    return AgentView(record, status, error, registered=False, protocol=link.spec.protocol)


def unavailable(
    agent_id: str, method: str, record: AgentRecord | None, link: Link | None
) -> AgentUnavailable:
    """Why ``agent_id`` cannot take a call now (unknown, offline, or no live connection),
    with the link's last error, so the caller need not read the log."""
    if record is None and link is None:
        return AgentUnavailable(
            f"no agent {agent_id!r} is registered", agent=agent_id, method=method
        )
    if record is None:
        assert link is not None
        status = link.status()
    else:
        status = str(record.status)
    if record is None or record.status is AgentStatus.OFFLINE:
        why = f"agent {agent_id!r} is {status}"
    else:
        why = f"agent {agent_id!r} has no live connection"
        if record.endpoint is None and link is None:
            why += " (it registered without an endpoint)"
    error = link.last_error if link is not None else None
    why += f" (last link error: {error})" if error else ""
    data = {"status": status, "link_error": error}
    return AgentUnavailable(why, agent=agent_id, method=method, data=data)
