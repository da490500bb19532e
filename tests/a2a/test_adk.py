"""Agents of Google ADK's, served over A2A by ADK's own ``to_a2a`` (processes of the ADK peer
virtualenv, ``make adk``), mounted as mesh agents by a real daemon: called with ``mesh call``,
from an MCP client through the daemon's ``/mcp``, taking turns in a room beside a persona, and
asking for input the way ADK does, answered by the MCP client. (ADK calling mesh agents is in
test_walls.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.client import Client

from mesh.testing import Daemon, spawn_daemon
from tests.a2a import _adk
from tests.a2a._adk import AdkAgent, adk_python, spawn_adk_agent
from tests.a2a._peer import ROOT
from tests.a2a.test_mount import _messages_of
from tests.conftest import BACKENDS
from tests.integration._daemon import persona_manifest
from tests.mcp.test_serve import over_http

pytestmark = pytest.mark.anyio

GUARD = 60.0


@pytest.fixture(scope="module", params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Module-scoped, so that one ADK agent and one daemon per backend serve every test here."""
    return str(request.param)


@dataclass
class Mounted:
    adk: AdkAgent
    daemon: Daemon


def manifest(agent: str, url: str) -> str:
    """An ADK agent as a mesh agent: its base URL, spoken to in A2A."""
    return f'id = "{agent}"\n[transport]\ntype = "http"\nendpoint = "{url}"\nprotocol = "a2a"\n'


@pytest.fixture(scope="module")
async def mounted(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Mounted]:
    tmp = tmp_path_factory.mktemp("adk")
    manifests = tmp / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", "Alice", ["Was it a rat I saw?"], 0.0)
    async with spawn_adk_agent("reverser") as adk, spawn_adk_agent("booker") as booker:
        (manifests / "backwards.toml").write_text(manifest("backwards", adk.url))
        (manifests / "travel.toml").write_text(manifest("travel", booker.url))
        data = ["--data-dir", str(tmp / "data")]
        async with spawn_daemon(manifests, extra_args=data) as daemon:
            await daemon.wait_online("backwards", "travel", "alice")
            yield Mounted(adk, daemon)


async def test_a_mounted_adk_agent_is_called_with_mesh_call(mounted: Mounted) -> None:
    # The card's one skill (ADK names it after the agent) is the mesh tool.
    env = {**os.environ, **mounted.daemon.env(), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "mesh.cli", "call", "backwards", "reverser"]
    with anyio.fail_after(GUARD):
        said = await anyio.run_process(
            [*command, "--arg", "text=stressed"], env=env, check=False, stderr=subprocess.PIPE
        )
    assert said.returncode == 0, said.stderr
    assert said.stdout.decode().strip().strip('"') == "desserts"
    # A tool the card does not list is refused by the mount, naming the card's skills.
    with anyio.fail_after(GUARD):
        wrong = await anyio.run_process(
            [*command[:-1], "book", "--arg", "text=x"], env=env, check=False, stderr=subprocess.PIPE
        )
    assert wrong.returncode != 0 and b"no skill 'book'" in wrong.stderr + wrong.stdout


async def test_a_mounted_adk_agent_is_an_mcp_tool_through_the_daemon(mounted: Mounted) -> None:
    with anyio.fail_after(GUARD):
        async with Client(over_http(mounted.daemon), mode="legacy") as mcp:
            tools = {tool.name for tool in (await mcp.list_tools()).tools}
            assert "backwards__reverser" in tools
            said = await mcp.call_tool("backwards__reverser", {"text": "drawer"})
    assert not said.is_error, said
    assert "reward" in str(said.content[0])


async def test_a_mounted_adk_agent_takes_its_turns_in_a_room(mounted: Mounted) -> None:
    room = {"id": "mirror", "topic": "Palindromes", "members": ["alice", "backwards"]}
    room["limits"] = {"max_turns": 2}  # type: ignore[assignment]
    async with mounted.daemon.client() as http:
        made = await http.post("/rooms", json=room)
        assert made.status_code == 201, made.text
        with anyio.fail_after(GUARD):
            async with mounted.daemon.open_events("/rooms/mirror/events") as events:
                said = await _messages_of(events, "backwards")
    # Its turn was the room's line since it last spoke ("Alice: Was it a rat I saw?"),
    # answered backwards.
    assert said == "?was I tar a ti saW :ecilA"


async def test_an_adk_agents_question_is_asked_of_an_mcp_client_and_its_answer_is_the_response(
    mounted: Mounted,
) -> None:
    """ADK asks as a long-running function call, and takes only that function's response as
    the answer: the MCP client is asked the call's question once, and its answer goes back
    as the response."""
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"text": "Lima"})

    with anyio.fail_after(GUARD):
        async with Client(
            over_http(mounted.daemon), mode="legacy", elicitation_callback=elicit
        ) as mcp:
            booked = await mcp.call_tool("travel__booker", {"text": "a trip"})
    assert not booked.is_error, booked
    assert "booked Lima" in str(booked.content[0])
    assert asked == ["Where to?"]


@pytest.fixture
def no_adk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_adk, "PYTHON", tmp_path / "no-venv" / "bin" / "python")
    monkeypatch.delenv("MESH_REQUIRE_ADK", raising=False)
    monkeypatch.delenv("CI", raising=False)


@pytest.mark.usefixtures("no_adk")
@pytest.mark.parametrize("variable", ["MESH_REQUIRE_ADK", "CI"])
def test_a_missing_adk_peer_fails_where_the_suite_must_be_whole(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "1")
    with pytest.raises(pytest.fail.Exception, match="run `make adk`"):
        adk_python()


@pytest.mark.usefixtures("no_adk")
def test_elsewhere_a_missing_adk_peer_skips_and_says_how_to_build_it() -> None:
    with pytest.raises(pytest.skip.Exception, match="run `make adk`"):
        adk_python()
