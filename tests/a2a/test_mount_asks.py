"""A mounted A2A agent that asks for input (the a2a-sdk's server, a process on loopback, its task
resting in INPUT_REQUIRED) asks the mesh caller: an embedder's ``on_elicit``, and an MCP client
through the daemon's ``/mcp``; the answer is the task's next message and the call goes on.

The tests share one a2a-sdk agent and one daemon per backend: each of its trips is a task of
its own, and the room test runs a room of its own id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.client import Client

from mesh import EMBEDDER, AgentSpec, MeshOrchestrator, ToolError
from mesh.a2a import a2a_connector
from mesh.rooms import MessageEvent, QuestionEvent, decode_event
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.a2a._mesh import ECHO
from tests.a2a._peer import SdkAgent, spawn_sdk_agent
from tests.a2a.test_mount import manifest
from tests.integration._daemon import persona_manifest
from tests.mcp.test_serve import over_http

pytestmark = pytest.mark.anyio

GUARD = 60.0
_TEXT = {"text": {"type": "string", "description": "your answer"}}


@pytest.fixture(scope="module")
async def peer(anyio_backend: str) -> AsyncIterator[SdkAgent]:
    async with spawn_sdk_agent() as shared:
        yield shared


@pytest.fixture(scope="module")
async def daemon(peer: SdkAgent, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Daemon]:
    """The SDK's agent mounted as ``shouter``, the echo agent and Alice: a daemon and its
    agents are most of what each test would cost, and each test asks in a call or a room
    of its own."""
    manifests = tmp_path_factory.mktemp("asks-manifests")
    (manifests / "shouter.toml").write_text(manifest(peer.url))
    (manifests / "echo.toml").write_text(ECHO)
    persona_manifest(manifests, "alice", "Alice", ["{speaker} said: {last}"], 0.0)
    data = ["--data-dir", str(tmp_path_factory.mktemp("asks-data"))]
    async with spawn_daemon(manifests, extra_args=data) as shared:
        await shared.wait_online("shouter", "echo", "alice")
        yield shared


async def test_input_required_is_an_elicitation_of_the_mesh_caller(peer: SdkAgent) -> None:
    asked: list[dict[str, Any]] = []

    async def person(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"text": "Oslo"}}

    async def declines(params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "decline"}

    spec = AgentSpec("shouter", a2a_connector(peer.url, agent="shouter"), transport="http")
    async with MeshOrchestrator([spec]) as mesh:
        with anyio.fail_after(GUARD):
            await mesh.wait_linked()
            booked = await mesh.call_tool(
                "shouter", "trip", {"text": "a trip"}, on_elicit=person, on_behalf_of=EMBEDDER
            )
            assert booked == "booked Oslo"
            assert asked == [
                {"message": "Where to?", "requestedSchema": asked[0]["requestedSchema"]}
            ]
            assert asked[0]["requestedSchema"]["properties"] == _TEXT
            with pytest.raises(ToolError, match="answered 'decline'; its task was cancelled"):
                await mesh.call_tool(
                    "shouter", "trip", {"text": "x"}, on_elicit=declines, on_behalf_of=EMBEDDER
                )
            with pytest.raises(ToolError, match=r"cannot be asked.*no on_elicit"):
                await mesh.call_tool("shouter", "trip", {"text": "x"}, on_behalf_of=EMBEDDER)
            # The link lives.
            shouted = await mesh.call_tool(
                "shouter", "shout", {"text": "hi"}, on_behalf_of=EMBEDDER
            )
            assert shouted == "HI"


async def test_an_mcp_client_answers_a_mounted_a2a_agents_question_through_mcp(
    daemon: Daemon,
) -> None:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        assert params.message == "Where to?"
        return types.ElicitResult(action="accept", content={"text": "Lima"})

    with anyio.fail_after(GUARD):
        async with Client(over_http(daemon), mode="legacy", elicitation_callback=elicit) as mcp:
            booked = await mcp.call_tool("shouter__trip", {"text": "a trip"})
    assert not booked.is_error, booked
    assert "booked Lima" in str(booked.content[0])


async def test_a_mesh_agents_question_keeps_its_schema_across_a_mount_of_the_mesh(
    daemon: Daemon,
) -> None:
    """A daemon's echo agent served over A2A and mounted by another mesh: its question's
    schema (the schema+json data part) is what the mounting mesh's caller is asked, and
    the fields answered go back as a data part."""
    asked: list[dict[str, Any]] = []

    async def person(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"action": "accept", "content": {"answer": "blue"}}

    url = f"{daemon.http}/a2a/echo"
    spec = AgentSpec("far", a2a_connector(url, agent="far", token=daemon.token), transport="http")
    async with MeshOrchestrator([spec]) as mesh:
        with anyio.fail_after(GUARD):
            await mesh.wait_linked()
            call = {"tool": "ask", "arguments": {"question": "colour?"}}
            got = await mesh.call_tool("far", "ask", call, on_elicit=person, on_behalf_of=EMBEDDER)
    assert asked[0]["message"] == "colour?"
    assert asked[0]["requestedSchema"] == {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
    }
    assert got == {"action": "accept", "answer": "blue"}


async def test_a_person_in_a_room_answers_a_mounted_a2a_agents_question(daemon: Daemon) -> None:
    """The mounted agent's turn in a room rests in INPUT_REQUIRED: the room records the
    question, a person joined over the people's routes answers it, and the task goes on
    to the turn's reply."""
    spec = {
        "id": "trip",
        "topic": "Plan a trip",
        "members": ["shouter", "alice"],
        "paused": True,
        "limits": {"max_turns": 1},
    }
    seen: list[Any] = []
    async with daemon.client() as http:
        assert (await http.post("/rooms", json=spec)).status_code == 201
        joined = await http.post("/rooms/trip/join", json={"name": "Carol"})
        assert joined.status_code == 200, joined.text
        assert (await http.post("/rooms/trip/resume")).status_code == 200
        with anyio.fail_after(GUARD):
            async with daemon.open_events("/rooms/trip/events") as watch:
                while not isinstance(event := decode_event(await watch.receive()), MessageEvent):
                    seen.append(event)
                    if isinstance(event, QuestionEvent):
                        body = {
                            "member": "carol",
                            "question": event.question,
                            "action": "accept",
                            "content": {"text": "Oslo"},
                        }
                        answered = await http.post("/rooms/trip/answer", json=body)
                        assert answered.status_code == 200, answered.text
    asked = [e for e in seen if isinstance(e, QuestionEvent)]
    assert [(q.agent_id, q.message) for q in asked] == [("shouter", "Where to?")]
    assert event.agent_id == "shouter" and event.text == "booked Oslo"
