"""``/readyz``'s reasons, state by state (the daemon's test shows the routes on a real one)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mesh import MeshOrchestrator
from mesh.daemon._lifecycle import Lifecycle
from mesh.daemon._metrics import Probes


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # no loop is run: Lifecycle's event is only set and read


def test_ready_only_when_serving_and_joined() -> None:
    lifecycle = Lifecycle()
    probes = Probes(MeshOrchestrator().links, lifecycle)
    assert probes.not_ready() == "starting: loading manifests and linking agents"
    lifecycle.start_serving()
    assert probes.not_ready() is None
    probes.cluster = SimpleNamespace(link=SimpleNamespace(connected=False))
    assert probes.not_ready() == "cluster: not connected to NATS"
    probes.cluster.link.connected = True
    assert probes.not_ready() is None
    lifecycle.start_draining()
    assert probes.not_ready() == "draining: the daemon is shutting down"
