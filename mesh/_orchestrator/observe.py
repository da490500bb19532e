"""What the orchestrator tells the process's metrics and, with tracing on, its spans.

Kept apart so the call path has one small hook in :meth:`~mesh._orchestrator.door.Door.call`,
through which every surface's calls pass: three plain functions with tracing off
(a few additions per call), :class:`observe_call` with it on.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from types import TracebackType

from mesh._errors import AgentUnavailable
from mesh._orchestrator.view import Link
from mesh._telemetry.metrics import KNOWN_METHODS, METRICS, OTHER, clock, status_of
from mesh._telemetry.tracing import client_span
from registry import AgentStatus, ChangeKind, StatusChange

__all__ = [
    "call_done",
    "call_failed",
    "call_started",
    "count_status_change",
    "link_counts",
    "observe_call",
]

#: The agent label of a call to an agent nobody knows: its name is the caller's string.
UNKNOWN_AGENT = "(unknown)"
_CALLS = METRICS.calls
_SERIES = _CALLS.series
_BUCKETS = _CALLS.buckets
_STARTED = METRICS.calls_started


def call_started() -> float:
    """Count a call as started; returns its start time, for :func:`call_done`."""
    _STARTED[0] += 1
    return clock()


def call_done(agent: str, method: str, started: float) -> None:
    """A call that answered: into ``mesh_rpc_client_duration_seconds`` as OK."""
    elapsed = clock() - started
    key = (agent, method if method in KNOWN_METHODS else OTHER, "OK")
    series = _SERIES.get(key)
    if series is None:
        series = _CALLS.series_for(key)
    series[bisect_left(_BUCKETS, elapsed)] += 1
    series[-1] += elapsed


def call_failed(
    agent: str, method: str, exc: BaseException, started: float, knows: Callable[[str], bool]
) -> None:
    """A call that failed, by its status; an agent nobody knows is not named."""
    elapsed = clock() - started
    # Only a call that found no agent can name one nobody knows: the name is then
    # whatever the caller typed, and must not become a label.
    if isinstance(exc, AgentUnavailable) and not knows(agent):
        agent = UNKNOWN_AGENT
    method = method if method in KNOWN_METHODS else OTHER
    _CALLS.observe((agent, method, status_of(exc)), elapsed)


class observe_call:  # a context manager, named like the function it reads as
    """One call as the metrics and a CLIENT span see it (the path when tracing is on):
    the span is current while the call runs, so the request carries it."""

    __slots__ = ("_agent", "_knows", "_method", "_span", "_started")

    def __init__(
        self, agent: str, method: str, knows: Callable[[str], bool], tool: str | None = None
    ) -> None:
        self._agent = agent
        self._method = method
        self._knows = knows
        self._started = 0.0
        self._span = client_span(method, agent, tool=tool)

    def __enter__(self) -> None:
        self._span.__enter__()
        self._started = call_started()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            call_done(self._agent, self._method, self._started)
        else:
            call_failed(self._agent, self._method, exc, self._started, self._knows)
        self._span.__exit__(kind, exc, tb)


_STALE, _OFFLINE, _REMOVED = ChangeKind.STALE, ChangeKind.OFFLINE, ChangeKind.REMOVED
_WAS_STALE = AgentStatus.STALE


def count_status_change(change: StatusChange) -> None:
    """Heartbeat misses (an agent went stale) and expirations (its TTL passed)."""
    # Called for every change of every agent (a mirrored registry's thousands a
    # second): the members are bound once, as an enum's attribute is a lookup.
    kind = change.kind
    if kind is _STALE:
        METRICS.heartbeat_misses.add()
    elif kind is _OFFLINE and change.old is _WAS_STALE:
        METRICS.expirations.add(("offline",))
    elif kind is _REMOVED:
        METRICS.expirations.add(("removed",))


def link_counts(links: Mapping[str, Link]) -> dict[tuple[str, str], int]:
    """How many links there are by (transport, status): ``connected`` or why not."""
    counts: dict[tuple[str, str], int] = {}
    for link in links.values():
        key = (link.spec.transport, "connected" if link.connected else link.status())
        counts[key] = counts.get(key, 0) + 1
    return counts
