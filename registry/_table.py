"""The heartbeat-TTL table of agents.

`Registry` is a pure, synchronous state machine: every call that changes it is
given the current time (``now``, float seconds on the caller's monotonic clock)
and it never reads a clock, sleeps or spawns a task. Statuses advance only
inside ``expire(now)``; `run_expiry` is the small async driver that calls it.

Why expiry costs what expires: agents sit in a min-heap keyed by the deadline of
their current status, and a heartbeat does not touch the heap; it only stores
``last_seen``. When ``expire`` pops an entry whose agent has beaten since, it
pushes it back at ``last_seen + interval`` (lazy re-scheduling) instead of
changing its status. Each heap item carries a generation number; re-registering,
reviving or removing an agent bumps it, so items left behind are recognised and
dropped when they surface (lazy invalidation). The heap key is therefore never
later than the agent's real deadline, and ``expire`` pops only entries whose key
has passed: transitions, at most one re-schedule per agent per interval, and
garbage. Not thread-safe: use it from one thread (the event loop's).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from ._errors import InvalidAgentRecord, UnknownAgent
from ._events import DEFAULT_SUBSCRIBER_BUFFER, Listener, Subscription, _Hub
from ._logging import get_logger
from ._types import (
    AgentId,
    AgentRecord,
    AgentStatus,
    ChangeKind,
    RegistryStatistics,
    StatusChange,
)

__all__ = ["Registry"]

_log = get_logger(__name__)

_ONLINE = AgentStatus.ONLINE
_STALE = AgentStatus.STALE
_OFFLINE = AgentStatus.OFFLINE
_REMOVED = AgentStatus.REMOVED
# Module constants: reading a member off an enum class is slow in CPython 3.11.
_REGISTERED = ChangeKind.REGISTERED
_REVIVED = ChangeKind.ONLINE
_DEREGISTERED = ChangeKind.DEREGISTERED
_NEXT = {
    _ONLINE: (_STALE, ChangeKind.STALE),
    _STALE: (_OFFLINE, ChangeKind.OFFLINE),
    _OFFLINE: (_REMOVED, ChangeKind.REMOVED),
}
#: Generation of an entry that left the table: every heap item for it is garbage.
_DEAD = -1
#: Garbage the heap may hold beyond one item per agent before it is compacted;
#: the rebuild is O(n), so it must be rarer than one in n changes to amortize.
_COMPACT_SLACK = 1024


class _Entry:
    """The mutable state behind one agent; `AgentRecord`s are its snapshots."""

    __slots__ = (
        "gen",
        "grace",
        "heartbeat_interval",
        "heartbeat_ttl",
        "last_seen",
        "record",
        "status",
    )

    def __init__(self, record: AgentRecord) -> None:
        self.gen = _DEAD
        self.status = _ONLINE
        self.update(record)

    def update(self, record: AgentRecord) -> None:
        self.record = record
        self.last_seen = record.last_seen
        # Copied out of the record so that the hot paths read plain slots.
        self.heartbeat_interval = record.heartbeat_interval
        self.heartbeat_ttl = record.heartbeat_ttl
        self.grace = record.grace

    def due(self) -> float:
        """When the current status ends, unless the agent beats first."""
        if self.status is _ONLINE:
            return self.last_seen + self.heartbeat_interval
        if self.status is _STALE:
            return self.last_seen + self.heartbeat_ttl
        return self.last_seen + self.heartbeat_ttl + self.grace

    def snapshot(self) -> AgentRecord:
        record = self.record
        if record.last_seen != self.last_seen or record.status is not self.status:
            record = msgspec.structs.replace(record, last_seen=self.last_seen, status=self.status)
            self.record = record  # cached until the next beat or change
        return record


_HeapItem = tuple[float, int, _Entry]


class Registry:
    """The heartbeat-TTL table of agents (see the module docstring for timing)."""

    def __init__(self) -> None:
        self._entries: dict[AgentId, _Entry] = {}
        # Ordered "sets" (dicts of None) so find() answers in registration order.
        self._by_capability: dict[str, dict[AgentId, None]] = {}
        self._counts = dict.fromkeys((_ONLINE, _STALE, _OFFLINE), 0)
        self._heap: list[_HeapItem] = []
        self._generations = itertools.count()
        self._deadline_watchers: list[Callable[[], None]] = []
        self._hub = _Hub()
        self._registrations = 0
        self._heartbeats = 0
        self._expire_calls = 0
        self._pushes = 0
        self._pops = 0
        self._reschedules = 0
        self._discarded = 0
        self._transitions = 0

    # -- changing the table ----------------------------------------------------

    def register(self, spec: AgentRecord | Mapping[str, Any], now: float) -> AgentRecord:
        """Add an agent, or update a known one (which also counts as a heartbeat).

        ``spec`` is a record or a mapping of its fields (as decoded from JSON);
        ``registered_at``, ``last_seen`` and ``status`` in it are ignored. A known
        agent keeps its first ``registered_at``. Publishes one REGISTERED change
        whose ``old`` is None for a new agent. Returns the stored snapshot.
        """
        record = spec if isinstance(spec, AgentRecord) else _record_from(spec)
        self._registrations += 1
        entry = self._entries.get(record.id)
        old = None if entry is None else entry.status
        if entry is None:
            record = _stamp(record, registered_at=now, last_seen=now)
            entry = self._entries[record.id] = _Entry(record)
            self._counts[_ONLINE] += 1
        else:
            self._unindex(entry)
            last_seen = max(now, entry.last_seen)
            entry.update(_stamp(record, entry.record.registered_at, last_seen))
            self._set_status(entry, _ONLINE)
        self._index(entry)
        self._schedule(entry, notify=True)
        self._maybe_compact()
        self._publish(entry, _REGISTERED, old, now)
        return entry.snapshot()

    def heartbeat(self, agent_id: AgentId, now: float) -> None:
        """Record a sign of life; a stale or offline agent comes back ONLINE.

        O(1) and allocation-free for an online agent: it stores ``last_seen`` and
        leaves the heap alone. Raises `UnknownAgent` for an id the table does not
        hold. A ``now`` earlier than the last one never moves ``last_seen`` back.
        """
        try:
            entry = self._entries[agent_id]
        except KeyError:
            raise UnknownAgent(agent_id) from None
        self._heartbeats += 1
        if now > entry.last_seen:
            entry.last_seen = now
        if entry.status is not _ONLINE:
            self._revive(entry, now)

    def deregister(self, agent_id: AgentId, now: float) -> AgentRecord:
        """Remove an agent at once; returns its final snapshot (status REMOVED)."""
        entry = self._entries.get(agent_id)
        if entry is None:
            raise UnknownAgent(agent_id)
        old = entry.status
        self._remove(entry)
        self._maybe_compact()
        self._publish(entry, _DEREGISTERED, old, now)
        final = entry.snapshot()
        _bury(entry)
        return final

    def mark_offline(self, agent_id: AgentId, now: float) -> AgentRecord:
        """Take an agent OFFLINE at once, e.g. because its connection was lost.

        Publishes an OFFLINE change (none if it already was offline). A later
        heartbeat revives it as usual; otherwise it is removed when it would have
        been anyway (``ttl + grace`` after its last sign of life). Raises
        `UnknownAgent` for an id the table does not hold.
        """
        entry = self._entries.get(agent_id)
        if entry is None:
            raise UnknownAgent(agent_id)
        old = entry.status
        if old is not _OFFLINE:
            self._set_status(entry, _OFFLINE)
            self._schedule(entry, notify=True)
            self._maybe_compact()
            self._publish(entry, ChangeKind.OFFLINE, old, now)
        return entry.snapshot()

    def expire(self, now: float) -> list[StatusChange]:
        """Advance every agent whose deadline is at or before ``now``.

        Returns the changes in time order (one agent may move several steps,
        e.g. ONLINE → STALE → OFFLINE, if expire was not called for a while) and
        publishes them after the whole step, so consumers see a settled table.
        """
        self._expire_calls += 1
        heap = self._heap
        changes: list[StatusChange] = []
        while heap and heap[0][0] <= now:
            deadline, gen, entry = heapq.heappop(heap)
            self._pops += 1
            if gen != entry.gen:
                self._discarded += 1
            elif entry.due() > deadline:
                self._reschedules += 1  # it beat since this item was pushed
                self._schedule(entry, notify=False)
            else:
                changes.append(self._advance(entry, deadline))
        if changes:
            self._transitions += len(changes)
            _log_expired(changes)
            self._hub.publish(changes)
        return changes

    # -- reading the table -----------------------------------------------------

    def next_deadline(self) -> float | None:
        """When ``expire`` may next have work, or None for an empty table.

        Never later than the next change; it may be earlier (an agent that beat
        is only re-scheduled when its old deadline comes round).
        """
        heap = self._heap
        while heap and heap[0][1] != heap[0][2].gen:
            heapq.heappop(heap)
            self._pops += 1
            self._discarded += 1
        return heap[0][0] if heap else None

    def get(self, agent_id: AgentId) -> AgentRecord | None:
        """The agent's current snapshot, or None if the table does not hold it."""
        entry = self._entries.get(agent_id)
        return None if entry is None else entry.snapshot()

    def find(
        self,
        capability: str | None = None,
        status: AgentStatus | Iterable[AgentStatus] | None = None,
    ) -> list[AgentRecord]:
        """Agents with ``capability`` (any if None) in ``status`` (any if None).

        ``status`` is one status or several. Costs the number of agents that have
        the capability (an index), or a scan when ``capability`` is None.
        """
        if capability is None:
            entries: Iterable[_Entry] = self._entries.values()
        else:
            ids = self._by_capability.get(capability, {})
            entries = [self._entries[agent_id] for agent_id in ids]
        if status is None:
            return [entry.snapshot() for entry in entries]
        wanted = {status} if isinstance(status, AgentStatus) else set(status)
        return [entry.snapshot() for entry in entries if entry.status in wanted]

    def ids(self) -> list[AgentId]:
        """Every agent's id, in registration order: a copy, and no snapshot is made."""
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._entries

    def statistics(self) -> RegistryStatistics:
        """What the table holds and the work done so far (see `RegistryStatistics`)."""
        return RegistryStatistics(
            agents=len(self._entries),
            online=self._counts[_ONLINE],
            stale=self._counts[_STALE],
            offline=self._counts[_OFFLINE],
            heap_size=len(self._heap),
            next_deadline=self.next_deadline(),
            registrations=self._registrations,
            heartbeats=self._heartbeats,
            expire_calls=self._expire_calls,
            heap_pushes=self._pushes,
            heap_pops=self._pops,
            reschedules=self._reschedules,
            discarded=self._discarded,
            transitions=self._transitions,
            listeners=len(self._hub.listeners),
            subscribers=len(self._hub.subscribers),
            subscriber_overflows=self._hub.overflows,
            listener_errors=self._hub.listener_errors,
            deadline_watchers=len(self._deadline_watchers),
        )

    # -- events ----------------------------------------------------------------

    def subscribe(self, *, max_buffer: int = DEFAULT_SUBSCRIBER_BUFFER) -> Subscription:
        """An async context manager and iterator of every change from now on.

        A subscriber more than ``max_buffer`` events behind is closed: it receives
        what was buffered, then `SubscriberOverflow`. The registry never waits.
        """
        return Subscription(self._hub, max_buffer)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(change)`` synchronously for every change.

        A listener that raises is logged and counted, and does not stop the
        others. A listener may change the table; the changes it causes are
        delivered after the one it is handling, to everyone in the same order.
        """
        self._hub.listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        """Stop calling ``listener``; does nothing if it was not added."""
        if listener in self._hub.listeners:
            self._hub.listeners.remove(listener)

    def _watch_deadlines(self, watcher: Callable[[], None]) -> Callable[[], None]:
        """Call ``watcher()`` when a register or revival makes an earlier deadline.

        For `run_expiry`, so it can cut its sleep short. Returns the remover.
        """
        self._deadline_watchers.append(watcher)
        return lambda: self._deadline_watchers.remove(watcher)

    # -- internals -------------------------------------------------------------

    def _revive(self, entry: _Entry, now: float) -> None:
        old = entry.status
        self._set_status(entry, _ONLINE)
        self._schedule(entry, notify=True)
        self._maybe_compact()
        self._publish(entry, _REVIVED, old, now)

    def _advance(self, entry: _Entry, at: float) -> StatusChange:
        old = entry.status
        new, kind = _NEXT[old]
        if new is _REMOVED:
            self._remove(entry)
            change = _change(entry, kind, old, at)
            _bury(entry)
            return change
        self._set_status(entry, new)
        self._schedule(entry, notify=False)
        return _change(entry, kind, old, at)

    def _set_status(self, entry: _Entry, status: AgentStatus) -> None:
        self._counts[entry.status] -= 1
        self._counts[status] += 1
        entry.status = status

    def _remove(self, entry: _Entry) -> None:
        del self._entries[entry.record.id]
        self._unindex(entry)
        self._counts[entry.status] -= 1
        entry.status = _REMOVED
        entry.gen = _DEAD

    def _schedule(self, entry: _Entry, *, notify: bool) -> None:
        """Push the entry at its current deadline, invalidating its older items."""
        gen = next(self._generations)
        entry.gen = gen
        heapq.heappush(self._heap, (entry.due(), gen, entry))
        self._pushes += 1
        if notify and self._heap[0][1] == gen:
            for watcher in tuple(self._deadline_watchers):
                watcher()

    def _maybe_compact(self) -> None:
        heap = self._heap
        if len(heap) > 2 * len(self._entries) + _COMPACT_SLACK:
            # In place: expire() may hold a reference to the list.
            heap[:] = [item for item in heap if item[1] == item[2].gen]
            heapq.heapify(heap)

    def _index(self, entry: _Entry) -> None:
        agent_id = entry.record.id
        for capability in entry.record.capabilities:
            self._by_capability.setdefault(capability, {})[agent_id] = None

    def _unindex(self, entry: _Entry) -> None:
        for capability in entry.record.capabilities:
            ids = self._by_capability[capability]
            del ids[entry.record.id]
            if not ids:
                del self._by_capability[capability]

    def _publish(
        self, entry: _Entry, kind: ChangeKind, old: AgentStatus | None, now: float
    ) -> None:
        if self._hub.listeners or self._hub.subscribers:  # else nobody to build it for
            self._hub.publish((_change(entry, kind, old, now),))

    # Last, because inside the class body the name shadows the builtin for mypy.
    def list(self) -> list[AgentRecord]:
        """Snapshots of every agent in the table, in registration order."""
        return [entry.snapshot() for entry in self._entries.values()]


def _change(entry: _Entry, kind: ChangeKind, old: AgentStatus | None, at: float) -> StatusChange:
    record = entry.snapshot()
    return StatusChange(
        kind=kind, agent_id=record.id, old=old, new=record.status, time=at, record=record
    )


def _bury(entry: _Entry) -> None:
    """Drop what a removed entry no longer needs: heap items may keep the entry itself
    alive until they surface or the heap is compacted (up to ``_COMPACT_SLACK`` of them),
    and its metadata may be large. Its final snapshot was already taken and published."""
    entry.record = msgspec.structs.replace(entry.record, metadata={}, capabilities=frozenset())


def _stamp(record: AgentRecord, registered_at: float, last_seen: float) -> AgentRecord:
    return msgspec.structs.replace(
        record, registered_at=registered_at, last_seen=last_seen, status=_ONLINE
    )


def _record_from(fields: Mapping[str, Any]) -> AgentRecord:
    try:
        return msgspec.convert(dict(fields), AgentRecord)
    except msgspec.ValidationError as exc:
        raise InvalidAgentRecord(f"cannot register agent {fields.get('id')!r}: {exc}") from exc


def _log_expired(changes: list[StatusChange]) -> None:
    # One line per expire step, not per agent: a partition can take thousands
    # of agents offline at once, and the event stream carries the details.
    counts = {str(kind): 0 for kind in (ChangeKind.STALE, ChangeKind.OFFLINE, ChangeKind.REMOVED)}
    for change in changes:
        counts[str(change.kind)] += 1
    _log.info("registry.expired", **counts)
