"""The Prometheus side of ``GET /metrics``: the daemon's metric families and their registry.

Loaded on the first scrape (:class:`~mesh.daemon._metrics.Probes`), so a daemon nobody
scrapes does not import ``prometheus_client``. What is exposed, and when it is counted,
is said in :mod:`mesh.daemon._metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest

from mesh._telemetry.metrics import METRICS, Histogram, Tally

if TYPE_CHECKING:
    from mesh._orchestrator.table import LinkTable

__all__ = ["MeshCollector", "exposition", "open_registry"]

_UNKNOWN_AGENT: Final = "(unknown)"


def open_registry(links: LinkTable, version: str) -> CollectorRegistry:
    """The registry ``/metrics`` renders: the mesh's families, and the process's."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MeshCollector(links, version))
    ProcessCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in the text format."""
    return generate_latest(registry)


def _histogram(h: Histogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(h.name, h.help, labels=h.labels)
    bounds = [*(repr(float(b)) for b in h.buckets), "+Inf"]
    for key, counts, count, total in h.cumulative():
        buckets = list(zip(bounds, [*counts, count], strict=True))
        family.add_metric(list(key), buckets, total)
    return family


def _counter(t: Tally) -> CounterMetricFamily:
    family = CounterMetricFamily(t.name.removesuffix("_total"), t.help, labels=t.labels)
    if not t.labels and not t.values:
        family.add_metric([], 0.0)  # a counter with no labels exists from the start
    for key, value in list(t.values.items()):
        family.add_metric(list(key), value)
    return family


class MeshCollector:
    """Turns :data:`~mesh._telemetry.metrics.METRICS` and the daemon's state into metric
    families."""

    def __init__(self, links: LinkTable, version: str) -> None:
        self._links = links
        self._version = version

    def collect(self) -> Iterator[Metric]:
        self._forget_gone_agents()
        info = InfoMetricFamily("mesh_build", "The running mesh's version")
        info.add_metric([], {"version": self._version})
        yield info
        yield from (_histogram(h) for h in (METRICS.calls, METRICS.served, METRICS.fanout))
        in_flight = GaugeMetricFamily(
            "mesh_rpc_calls_in_flight",
            "Calls made (client) and requests being answered (server) right now",
            labels=("side",),
        )
        finished = sum(count for _, _, count, _ in METRICS.calls.cumulative())
        in_flight.add_metric(["client"], METRICS.calls_started[0] - finished)
        in_flight.add_metric(["server"], METRICS.in_flight["server"])
        yield in_flight
        yield from self._wire()
        yield from self._links_and_registry()
        for tally in (
            METRICS.reconnects,
            METRICS.agent_restarts,
            METRICS.link_failures,
            METRICS.heartbeat_misses,
            METRICS.expirations,
            METRICS.room_stops,
            METRICS.tokens,
            METRICS.nats_reconnects,
        ):
            yield _counter(tally)
        yield _histogram(METRICS.turn_seconds)
        yield _histogram(METRICS.remote_calls)

    def _forget_gone_agents(self) -> None:
        """Series of agents this daemon no longer knows go, so agents that come and go
        do not grow the exposition for ever (the agent label is bounded by the registry)."""
        calls = METRICS.calls.series
        for key in [k for k in calls if k[0] != _UNKNOWN_AGENT and not self._links.knows(k[0])]:
            # Their calls are finished: they leave the started count too (in flight = the
            # started less the finished).
            METRICS.calls_started[0] -= int(sum(calls.pop(key)[:-1]))
        for tally in (METRICS.tokens, METRICS.agent_restarts, METRICS.link_failures):
            values = tally.values
            for key in [k for k in values if not self._links.knows(k[0])]:
                del values[key]

    def _wire(self) -> Iterator[Metric]:
        frames_in, bytes_in, frames_out, bytes_out = METRICS.wire
        frames = CounterMetricFamily(
            "mesh_frames", "Frames (one message each) read and written", labels=("direction",)
        )
        frames.add_metric(["in"], frames_in)
        frames.add_metric(["out"], frames_out)
        size = CounterMetricFamily(
            "mesh_frame_bytes", "Bytes of frames read and written", labels=("direction",)
        )
        size.add_metric(["in"], bytes_in)
        size.add_metric(["out"], bytes_out)
        return iter((frames, size))

    def _links_and_registry(self) -> Iterator[Metric]:
        links = GaugeMetricFamily(
            "mesh_links",
            "Links to agents by transport and status (connected, connecting, waiting, offline)",
            labels=("transport", "status"),
        )
        for (transport, status), n in sorted(self._links.link_counts().items()):
            links.add_metric([transport, status], n)
        yield links
        stats = self._links.registry.statistics()
        agents = GaugeMetricFamily(
            "mesh_registry_agents", "Agents in the registry by status", labels=("status",)
        )
        for status in ("online", "stale", "offline"):
            agents.add_metric([status], getattr(stats, status))
        yield agents
