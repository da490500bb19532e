"""What the orchestrator tells the process's metrics and, with tracing on, its spans.

Kept apart so the call path has one small hook: :func:`observe_call` around
:meth:`~mesh.MeshOrchestrator.call`, through which every surface's calls pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType

from mesh._metrics import METRICS, clock, method_label, status_of
from mesh._orchestrator.view import Link
from mesh._tracing import active as tracing_active
from mesh._tracing import client_span
from registry import AgentStatus, ChangeKind, StatusChange

__all__ = ["count_status_change", "link_counts", "observe_call"]

#: The agent label of a call to an agent nobody knows: its name is the caller's string.
UNKNOWN_AGENT = "(unknown)"


class observe_call:  # a context manager, named like the function it reads as
    """One call as the process's metrics and (when tracing) a CLIENT span see it.

    Times it into ``mesh_rpc_client_duration_seconds`` and counts it in flight; with
    tracing on, the span is current while the call runs, so the request carries it.
    """

    __slots__ = ("_agent", "_knows", "_method", "_span", "_started")

    def __init__(self, agent: str, method: str, knows: Callable[[str], bool]) -> None:
        self._agent = agent
        self._method = method
        self._knows = knows
        self._started = 0.0
        self._span: client_span | None = None

    def __enter__(self) -> None:
        METRICS.in_flight["client"] += 1
        if tracing_active():
            self._span = client_span(self._method, self._agent)
            self._span.__enter__()
        self._started = clock()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed = clock() - self._started
        METRICS.in_flight["client"] -= 1
        agent = self._agent if self._knows(self._agent) else UNKNOWN_AGENT
        METRICS.calls.observe((agent, method_label(self._method), status_of(exc)), elapsed)
        if self._span is not None:
            self._span.__exit__(kind, exc, tb)


def count_status_change(change: StatusChange) -> None:
    """Heartbeat misses (an agent went stale) and expirations (its TTL passed)."""
    if change.kind is ChangeKind.STALE:
        METRICS.heartbeat_misses.add()
    elif change.kind is ChangeKind.OFFLINE and change.old is AgentStatus.STALE:
        METRICS.expirations.add(("offline",))
    elif change.kind is ChangeKind.REMOVED:
        METRICS.expirations.add(("removed",))


def link_counts(links: Mapping[str, Link]) -> dict[tuple[str, str], int]:
    """How many links there are by (transport, status): ``connected`` or why not."""
    counts: dict[tuple[str, str], int] = {}
    for link in links.values():
        key = (link.spec.transport, "connected" if link.connected else link.status())
        counts[key] = counts.get(key, 0) + 1
    return counts
