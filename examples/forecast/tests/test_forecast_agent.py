"""The forecast agent, tested with the mesh's pytest plugin: in memory, and through a daemon."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mesh import InvalidParams, Peer, ToolError
from mesh.pytest_plugin import MeshDaemon

pytestmark = pytest.mark.both_backends  # every async test here runs on asyncio and on trio

PROJECT = Path(__file__).resolve().parent.parent


async def test_it_knows_its_cities(mesh_peer: Peer) -> None:
    assert await mesh_peer.call_tool("cities") == ["cairo", "lisbon", "oslo", "reykjavik"]


async def test_a_forecast_day_by_day_with_progress(mesh_peer: Peer) -> None:
    progress: list[Any] = []
    days = await mesh_peer.call_tool(
        "forecast", {"city": "Oslo", "days": 2}, on_progress=progress.append
    )
    assert days == [
        {"day": 1, "sky": "cloudy", "high_c": 12.0, "low_c": 4.0},
        {"day": 2, "sky": "rain", "high_c": 11.0, "low_c": 3.5},
    ]
    assert [p["message"] for p in progress] == ["day 1 of 2", "day 2 of 2"]


async def test_bad_arguments_are_refused_with_their_path(mesh_peer: Peer) -> None:
    with pytest.raises(InvalidParams, match=r"Expected `int` <= 7 - at `\$\.days`"):
        await mesh_peer.call_tool("forecast", {"city": "Oslo", "days": 30})
    with pytest.raises(ToolError, match="unknown city 'Atlantis'; try one of: cairo"):
        await mesh_peer.call_tool("forecast", {"city": "Atlantis", "days": 1})


async def test_through_a_running_daemon(mesh_daemon: MeshDaemon) -> None:
    await mesh_daemon.wait_online("forecast")
    days = await mesh_daemon.client.call_tool("forecast", "forecast", {"city": "Cairo", "days": 1})
    assert days == [{"day": 1, "sky": "rain", "high_c": 28.0, "low_c": 22.0}]  # made up, remember


def mesh(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mesh.cli", *args]
    return subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=60)


def test_the_commands_in_the_readme() -> None:
    validated = mesh("validate", "manifests")
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.splitlines()[-1] == "1 valid, 0 invalid"
    arguments = ["--arg", "city=Lisbon", "--arg", "days=1"]
    called = mesh("dev", "forecast_agent.py", "--call", "forecast", *arguments)
    assert called.returncode == 0, called.stderr
    assert '"sky": "sunny"' in called.stdout
    assert "progress 1/1 day 1 of 1" in called.stderr
