"""``GET /metrics`` (the Prometheus text format) and the health probes ``/healthz``, ``/readyz``.

The process's tallies (:mod:`mesh._telemetry.metrics`) and what the daemon can count at
scrape time (links, the registry) become metric families only when Prometheus
asks, through one ``prometheus_client`` collector: the call path never touches
the library. ``/metrics`` needs the ``read`` right (an observer token is what a
scraper gets); the probes are public and say only "ok" or why not
(docs/observability.md, docs/security.md).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Final

import msgspec

from mesh.daemon._auth import Identity
from mesh.daemon._lifecycle import Lifecycle
from mesh.daemon._routes import Params
from transports import HttpRequest, HttpResponse

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from mesh._orchestrator.table import LinkTable

__all__ = ["Probes", "mesh_version"]

_NO_STORE: Final = (("cache-control", "no-store"),)
#: The classic text format, which every Prometheus 2.x reads (our names need nothing newer).
EXPOSITION: Final = "text/plain; version=0.0.4; charset=utf-8"


def mesh_version() -> str:
    """The installed distribution's version: what ``mesh --version`` and build_info say."""
    try:
        return version("agent-mesh")
    except PackageNotFoundError:  # run from a source tree nobody installed
        return "0+unknown"


def _answer(status: int, payload: dict[str, str]) -> HttpResponse:
    return HttpResponse(status, msgspec.json.encode(payload), headers=_NO_STORE)


class Probes:
    """The handlers of ``/metrics``, ``/healthz`` and ``/readyz``."""

    def __init__(self, links: LinkTable, lifecycle: Lifecycle) -> None:
        self._lifecycle = lifecycle
        self.cluster: Any = None
        self._links = links
        self._registry: CollectorRegistry | None = None

    @property
    def registry(self) -> CollectorRegistry:
        """What ``/metrics`` renders, made on the first scrape: ``prometheus_client`` is
        loaded then, not by every daemon at its start (every figure is counted without it)."""
        if self._registry is None:
            from mesh.daemon._exposition import open_registry

            self._registry = open_registry(self._links, mesh_version())
        return self._registry

    def http_handlers(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "healthz": self.healthz, "readyz": self.readyz}

    async def metrics(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        from mesh.daemon._exposition import exposition

        body = exposition(self.registry)
        return HttpResponse(200, body, content_type=EXPOSITION, headers=_NO_STORE)

    async def healthz(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        """Alive: the process answers HTTP. Nothing else is said."""
        return _answer(200, {"status": "ok"})

    async def readyz(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        """Ready for work: listening, manifests loaded and linked, NATS joined if clustered."""
        reason = self.not_ready()
        if reason is None:
            return _answer(200, {"status": "ready"})
        return _answer(503, {"status": "not ready", "reason": reason})

    def not_ready(self) -> str | None:
        """Why the daemon should get no traffic now, in words that name nothing private."""
        if self._lifecycle.starting:
            return "starting: loading manifests and linking agents"
        if self._lifecycle.draining:
            return "draining: the daemon is shutting down"
        cluster = self.cluster
        if cluster is not None and not cluster.link.connected:
            return "cluster: not connected to NATS"
        return None
