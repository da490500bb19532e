"""The process's own tallies: plain counters and histograms the call path updates.

The call path must not pay for a metrics library on every call (an in-process
call costs ~25 µs; a lock, a label lookup and a bucket loop per update would be
a tenth of that), so the hooks only add to plain numbers here, keyed by tuples
of *bounded* label values. ``mesh serve`` turns them into the Prometheus text
format at scrape time (``mesh/daemon/_metrics.py``); nothing here imports a
metrics library, and a process that never scrapes pays a few additions per call.

Label values are bounded where they are made: an agent label is an agent the
process has a link or a registration for (or ``"(unknown)"``), a method label is
one of :data:`KNOWN_METHODS` (or ``"(other)"``), a status is an error code's
name. No request id, room id or argument ever becomes a label (docs/observability.md).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from types import TracebackType
from typing import Final

from mesh._errors import ErrorCode, MeshError

__all__ = [
    "CALL_BUCKETS",
    "KNOWN_METHODS",
    "METRICS",
    "OTHER",
    "Histogram",
    "Metrics",
    "Tally",
    "method_label",
    "served",
    "status_label",
    "status_of",
    "timed",
]

#: Seconds: a loopback call takes tens of microseconds, an LLM turn tens of seconds.
CALL_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
#: How many agents a broadcast went to.
FANOUT_BUCKETS: Final = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0)

#: The methods that get a label of their own; any other method counts as "(other)",
#: since a client may send any string as a method.
KNOWN_METHODS: Final = frozenset(
    {
        "tools/call",
        "tools/list",
        "ping",
        "initialize",
        "mesh/call",
        "room/turn",
        "room/persona",
        "resources/list",
        "resources/read",
        "prompts/list",
        "prompts/get",
    }
)

#: The error codes' names by number: with "OK" and "ERROR", every status label there is.
_STATUS: Final = {c.value: c.name for c in ErrorCode}


#: The method label of every method not in :data:`KNOWN_METHODS`.
OTHER: Final = "(other)"


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else OTHER


def status_label(code: int | None) -> str:
    """``"OK"`` for success, else the error code's name (``"TIMEOUT"``), else ``"ERROR"``."""
    if code is None:
        return "OK"
    return _STATUS.get(code, "ERROR")


class Tally:
    """A counter per tuple of label values."""

    __slots__ = ("help", "labels", "name", "values")

    def __init__(self, name: str, help: str, labels: tuple[str, ...] = ()) -> None:
        self.name = name
        self.help = help
        self.labels = labels
        self.values: dict[tuple[str, ...], float] = {}

    def add(self, key: tuple[str, ...] = (), amount: float = 1.0) -> None:
        values = self.values
        values[key] = values.get(key, 0.0) + amount


class Histogram:
    """Bucket counts (not cumulative) and a sum per tuple of label values."""

    __slots__ = ("buckets", "help", "labels", "name", "series")

    def __init__(
        self, name: str, help: str, labels: tuple[str, ...], buckets: tuple[float, ...]
    ) -> None:
        self.name = name
        self.help = help
        self.labels = labels
        self.buckets = buckets
        #: key -> [count per bucket..., count above the last bucket, sum]
        self.series: dict[tuple[str, ...], list[float]] = {}

    def series_for(self, key: tuple[str, ...]) -> list[float]:
        """The counts of ``key`` (made empty the first time)."""
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = [0.0] * (len(self.buckets) + 2)
        return series

    def observe(self, key: tuple[str, ...], value: float) -> None:
        series = self.series.get(key)
        if series is None:
            series = self.series_for(key)
        series[bisect_left(self.buckets, value)] += 1
        series[-1] += value

    def cumulative(self) -> Iterator[tuple[tuple[str, ...], list[float], float, float]]:
        """(key, cumulative counts per bucket, count, sum) for each series."""
        for key, series in list(self.series.items()):
            running, counts = 0.0, []
            for n in series[:-2]:
                running += n
                counts.append(running)
            count = running + series[-2]
            yield key, counts, count, series[-1]


class Metrics:
    """Every tally the mesh keeps, one per process."""

    def __init__(self) -> None:
        self.calls = Histogram(
            "mesh_rpc_client_duration_seconds",
            "Calls this process made to agents, by agent, method and status (OK or the"
            " error code's name): TIMEOUT, CANCELLED and the other codes are the failures",
            ("agent", "method", "status"),
            CALL_BUCKETS,
        )
        self.served = Histogram(
            "mesh_rpc_server_duration_seconds",
            "Requests this process answered, by the surface they came in on"
            " (http, mcp, agent, cluster), method and status",
            ("surface", "method", "status"),
            CALL_BUCKETS,
        )
        #: Calls this process started: those in flight are these less the finished ones
        #: (the histogram's count), so a call adds one number as it starts, not two.
        self.calls_started = [0]
        self.in_flight = {"server": 0}
        self.reconnects = Tally(
            "mesh_link_reconnects_total",
            "Links to agents that dropped and redialled",
            ("transport",),
        )
        self.agent_restarts = Tally(
            "mesh_agent_restarts_total",
            "Times the daemon dialled an agent again (a stdio agent: spawned its process"
            " again) after a connection or an attempt ended, by agent",
            ("agent",),
        )
        self.link_failures = Tally(
            "mesh_agent_link_failures_total",
            "Attempts to link an agent that ended before the handshake (a process that"
            " exited, a command not found, a refused connection), by agent",
            ("agent",),
        )
        self.heartbeat_misses = Tally(
            "mesh_heartbeat_misses_total",
            "Agents that went stale: no heartbeat within their interval",
        )
        self.expirations = Tally(
            "mesh_registry_expirations_total",
            "Agents the registry marked offline or removed when their TTL passed",
            ("kind",),
        )
        self.fanout = Histogram(
            "mesh_broadcast_fanout", "How many agents each broadcast went to", (), FANOUT_BUCKETS
        )
        #: frames in, bytes in, frames out, bytes out: updated by every session.
        self.wire = [0, 0, 0, 0]
        self.turn_seconds = Histogram(
            "mesh_room_turn_duration_seconds",
            "Room turns (the speaking agent's room/turn call), by outcome: spoken or failed",
            ("outcome",),
            CALL_BUCKETS,
        )
        self.room_stops = Tally(
            "mesh_room_stops_total", "Rooms that stopped, by why they stopped", ("reason",)
        )
        self.tokens = Tally(
            "mesh_provider_tokens_total",
            "Tokens the persona agents' providers reported for room turns, by agent and type"
            " (input or output)",
            ("agent", "type"),
        )
        self.nats_reconnects = Tally(
            "mesh_cluster_nats_reconnects_total", "Times this daemon's NATS connection came back"
        )
        self.remote_calls = Histogram(
            "mesh_cluster_remote_call_duration_seconds",
            "Calls this daemon sent over NATS to an agent another daemon holds, by status",
            ("status",),
            CALL_BUCKETS,
        )


#: The process's tallies (a daemon serves them on ``/metrics``).
METRICS: Final = Metrics()

#: The clock durations are measured with (monotonic, sub-microsecond).
clock: Final = time.perf_counter


def status_of(exc: BaseException | None) -> str:
    """The status label of how a call ended: OK, an error code's name, or CANCELLED."""
    if exc is None:
        return "OK"
    if isinstance(exc, MeshError):
        return status_label(exc.code)
    if isinstance(exc, Exception):
        return "INTERNAL_ERROR"
    return "CANCELLED"  # the caller's scope was cancelled (a client gone, its own deadline)


class timed:  # a context manager, named like the function it reads as
    """Times what runs inside into ``histogram`` under ``labels`` + (status,).

    ``side`` ("client" or "server") is counted in flight meanwhile, when given.
    """

    __slots__ = ("_histogram", "_labels", "_side", "_started")

    def __init__(self, histogram: Histogram, labels: tuple[str, ...], side: str | None) -> None:
        self._histogram = histogram
        self._labels = labels
        self._side = side
        self._started = 0.0

    def __enter__(self) -> None:
        if self._side is not None:
            METRICS.in_flight[self._side] += 1
        self._started = clock()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed = clock() - self._started
        if self._side is not None:
            METRICS.in_flight[self._side] -= 1
        self._histogram.observe((*self._labels, status_of(exc)), elapsed)


def served(surface: str, method: str) -> timed:
    """Times a request this process answers on ``surface`` (http, mcp, agent, cluster)."""
    return timed(METRICS.served, (surface, method_label(method)), "server")
