"""The registry's value types: ids, statuses, agent records, change events, statistics.

Records and events are frozen msgspec Structs so that the daemon can put them on
the wire (``POST /agents/register``, an event feed) with no second schema.
Times are float seconds on a monotonic clock that the caller supplies; the
registry never reads a clock itself.
"""

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NewType

import msgspec

from ._errors import InvalidAgentRecord

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_INTERVAL",
    "TTL_FACTOR",
    "AgentId",
    "AgentRecord",
    "AgentStatus",
    "ChangeKind",
    "RegistryStatistics",
    "StatusChange",
]

AgentId = NewType("AgentId", str)

#: Seconds between heartbeats unless an agent says otherwise (ARCHITECTURE: Liveness).
DEFAULT_INTERVAL = 10.0
#: The TTL defaults to this many intervals, so two lost heartbeats do not take an
#: agent offline but a third does.
TTL_FACTOR = 3
#: Seconds an offline agent is kept before removal: long enough for a reconnect
#: with backoff (capped at 30 s) to re-register it under the same record.
DEFAULT_GRACE = 60.0

_INF = float("inf")


class AgentStatus(enum.StrEnum):
    """Where an agent is in its life: ONLINE → STALE → OFFLINE → REMOVED.

    A heartbeat (or re-registration) from STALE or OFFLINE puts it back ONLINE.
    REMOVED only appears in events and final snapshots: the table drops the agent.
    """

    ONLINE = "online"
    STALE = "stale"  # no heartbeat for one interval
    OFFLINE = "offline"  # no heartbeat for the TTL
    REMOVED = "removed"  # offline for the grace period, or deregistered


class ChangeKind(enum.StrEnum):
    """Why a `StatusChange` happened."""

    REGISTERED = "registered"  # first registration (old is None) or re-registration
    ONLINE = "online"  # a heartbeat revived a stale or offline agent
    STALE = "stale"
    OFFLINE = "offline"
    REMOVED = "removed"  # grace period over
    DEREGISTERED = "deregistered"


class AgentRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One agent as the registry knows it.

    Build one to register; ``registered_at``, ``last_seen`` and ``status`` are set
    by the registry and ignored on input. ``heartbeat_ttl=0`` (the default) means
    ``TTL_FACTOR * interval``; after construction ``ttl`` always holds the
    resolved value. ``metadata`` is shared, not copied: treat it as immutable.
    """

    id: AgentId
    name: str
    transport: str = "memory"  # "stdio" | "http" | "websocket" | "memory" | other
    endpoint: str | None = None
    capabilities: frozenset[str] = frozenset()
    metadata: Mapping[str, Any] = msgspec.field(default_factory=dict)
    heartbeat_interval: float = DEFAULT_INTERVAL
    heartbeat_ttl: float = 0.0
    grace: float = DEFAULT_GRACE
    registered_at: float = 0.0
    last_seen: float = 0.0
    status: AgentStatus = AgentStatus.ONLINE

    def __post_init__(self) -> None:
        # Runs on every construction and every snapshot (msgspec's replace), so
        # the valid case is one chained comparison; _repair() explains failures.
        if self.heartbeat_ttl == 0.0:
            msgspec.structs.force_setattr(
                self, "heartbeat_ttl", TTL_FACTOR * self.heartbeat_interval
            )
        if not (
            self.id
            and 0.0 < self.heartbeat_interval <= self.heartbeat_ttl < _INF
            and 0.0 <= self.grace < _INF
            and type(self.capabilities) is frozenset
        ):
            self._repair()

    def _repair(self) -> None:
        # Raised as InvalidAgentRecord (a ValueError), which msgspec.convert turns
        # into a ValidationError that carries the path; Registry re-raises that.
        if not self.id:
            raise InvalidAgentRecord("agent id must be a non-empty string")
        for name in ("heartbeat_interval", "heartbeat_ttl"):
            value = getattr(self, name)
            if not 0.0 < value < _INF:
                raise InvalidAgentRecord(
                    f"agent {self.id!r}: {name} must be a finite number of seconds > 0, "
                    f"not {value!r}"
                )
        if self.heartbeat_ttl < self.heartbeat_interval:
            raise InvalidAgentRecord(
                f"agent {self.id!r}: heartbeat_ttl ({self.heartbeat_ttl} s) must be at least its "
                f"heartbeat_interval ({self.heartbeat_interval} s), or it would go offline "
                "before it could be stale"
            )
        if not 0.0 <= self.grace < _INF:
            raise InvalidAgentRecord(
                f"agent {self.id!r}: grace must be a finite number of seconds >= 0, "
                f"not {self.grace!r}"
            )
        # Typed frozenset, but callers pass lists and sets; kept as given they
        # would make snapshots share mutable state.
        capabilities: Any = self.capabilities
        msgspec.structs.force_setattr(self, "capabilities", frozenset(capabilities))


class StatusChange(msgspec.Struct, frozen=True, kw_only=True):
    """One change of an agent's status, as published to listeners and subscribers.

    ``time`` is when the change took effect: the ``now`` given to register,
    heartbeat or deregister, or, for changes made by ``expire``, the deadline that
    passed (so events from one ``expire`` call come out in time order).
    ``record`` is a snapshot taken at the change, with ``status == new``.
    """

    kind: ChangeKind
    agent_id: AgentId
    old: AgentStatus | None  # None for a first registration
    new: AgentStatus
    time: float
    record: AgentRecord


@dataclass(frozen=True, slots=True)
class RegistryStatistics:
    """Counts of what the registry holds and of the work it has done.

    The work counters are cumulative; compare two snapshots to see what one call
    cost. ``heap_pops`` is the unit of expiry work: it is the number of agents
    whose deadline passed (``transitions``) plus ``reschedules`` (agents that beat
    since their entry was pushed, pushed back once per interval at most) plus
    ``discarded`` (entries left behind by re-registration, revival or removal).
    """

    agents: int
    online: int
    stale: int
    offline: int
    heap_size: int
    next_deadline: float | None
    registrations: int
    heartbeats: int
    expire_calls: int
    heap_pushes: int
    heap_pops: int
    reschedules: int
    discarded: int
    transitions: int
    listeners: int
    subscribers: int
    subscriber_overflows: int
    listener_errors: int
    #: Expiry drivers (``run_expiry``) waiting to hear of an earlier deadline.
    deadline_watchers: int
