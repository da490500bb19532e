"""What the mesh's pytest plugin needs to know about this project: the agent and its manifests."""

from __future__ import annotations

from pathlib import Path

import pytest

import forecast_agent
from mesh import Agent


@pytest.fixture
def mesh_agent() -> Agent:
    """The agent the `mesh_peer` fixture serves in memory."""
    return forecast_agent.agent


@pytest.fixture
def mesh_manifests() -> Path:
    """The manifests the `mesh_daemon` fixture's `mesh serve` loads."""
    return Path(__file__).parent / "manifests"
