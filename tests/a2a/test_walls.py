"""What clients of other ecosystems meet, through a real daemon with the a2a-sdk's client: text
reaching a multi-tool agent through its text entry (a manifest's or the agent SDK's setting),
numbers sent as doubles taken where a tool wants integers, and a persona's streamed reply that
opens its artifact before appending to it and is said once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, Task, TaskState
from google.protobuf import json_format, struct_pb2

from mesh import Agent
from mesh._sdk.serve import serve_agent_dial_in
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.a2a._adk import run_remote
from tests.a2a._mesh import (
    GUARD,
    HELD,
    HELD_TOKEN,
    Mesh,
    as_dict,
    sdk_client,
    text_message,
    tool_message,
)
from tests.a2a._mesh import Held as _Held
from tests.integration._daemon import persona_manifest, serve_in_process

pytestmark = pytest.mark.anyio

#: The echo agent (five tools), whose manifest names `echo` as where text goes.
DESK = """id = "desk"
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio"]
[metadata]
text_entry = "echo"
"""


@dataclass
class Booked:
    calls: list[dict[str, Any]]


def travel_agent(booked: Booked) -> Agent:
    """Two tools; the agent SDK's ``text_entry`` names the one text goes to."""
    agent = Agent("held", description="Books trips.", text_entry="book")

    @agent.tool
    def book(request: str, nights: int = 1) -> str:
        """Book a trip."""
        booked.calls.append({"request": request, "nights": nights})
        return f"booked {request!r} for {nights} nights"

    @agent.tool
    def cancel(booking: str) -> str:
        """Cancel a booking."""
        return f"cancelled {booking}"

    return agent


@pytest.fixture(scope="module")
async def walls(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Mesh, Booked]]:
    tmp = tmp_path_factory.mktemp("walls")
    manifests = tmp / "manifests"
    manifests.mkdir()
    (manifests / "desk.toml").write_text(DESK)
    (manifests / "held.toml").write_text(HELD)
    persona_manifest(manifests, "alice", "Alice", ["Tea, always. {last}"], 0.05)
    booked = Booked([])
    with pytest.MonkeyPatch.context() as env:
        env.setenv("A2A_HELD_TOKEN", HELD_TOKEN)
        async with (
            serve_in_process(manifests, tmp / "data") as daemon,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_dial_in, travel_agent(booked), daemon.ws)
            await daemon.wait_online("desk", "held", "alice", timeout=GUARD)
            yield Mesh(daemon, _Held()), booked
            tg.cancel_scope.cancel()


async def _dial_in(agent: Agent, url: str) -> None:
    await serve_agent_dial_in(agent, url, token=HELD_TOKEN)


def mixed_message(text: str, data: dict[str, Any]) -> SendMessageRequest:
    """Text and a data object, as the a2a-sdk sends them (numbers as doubles)."""
    value = json_format.ParseDict(data, struct_pb2.Value())
    parts = [Part(text=text), Part(data=value)]
    return SendMessageRequest(
        message=Message(message_id="m-mixed", role=Role.ROLE_USER, parts=parts)
    )


async def send(mesh: Mesh, agent: str, request: SendMessageRequest) -> Task:
    async with sdk_client(mesh, agent, streaming=False) as (client, _):
        with anyio.fail_after(GUARD):
            events = [e async for e in client.send_message(request)]
    return events[-1].task


async def test_text_reaches_the_text_entry_a_manifest_names(walls: tuple[Mesh, Booked]) -> None:
    mesh, _ = walls
    task = await send(mesh, "desk", text_message("hello, desk"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert as_dict(task.artifacts[0])["parts"] == [{"data": {"message": "hello, desk"}}]
    # A tool named in a data part is still called, whatever the entry.
    task = await send(mesh, "desk", tool_message("reverse", text="ab"))
    assert as_dict(task.artifacts[0])["parts"] == [{"data": {"text": "ba"}}]


async def test_text_and_data_reach_the_text_entry_the_agent_sdk_names_with_whole_numbers(
    walls: tuple[Mesh, Booked],
) -> None:
    mesh, booked = walls
    task = await send(mesh, "held", mixed_message("two nights in Oslo", {"nights": 2}))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert booked.calls[-1] == {"request": "two nights in Oslo", "nights": 2}
    assert type(booked.calls[-1]["nights"]) is int
    task = await send(mesh, "held", text_message("a weekend"))
    assert booked.calls[-1] == {"request": "a weekend", "nights": 1}


async def test_a_number_sent_as_a_double_is_the_integer_a_tool_wants(
    walls: tuple[Mesh, Booked],
) -> None:
    mesh, _ = walls
    task = await send(mesh, "desk", tool_message("blob", size=4))  # a Struct: 4.0 on the wire
    assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
    assert as_dict(task.artifacts[0])["parts"] == [{"data": {"data": "xxxx"}}]
    # A fraction is no integer: the tool says so, as it would to anyone.
    task = await send(mesh, "desk", tool_message("blob", size=4.5))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "int" in task.status.message.parts[0].text


async def test_a_persona_reply_streams_into_an_artifact_it_opened_and_is_said_once(
    walls: tuple[Mesh, Booked],
) -> None:
    mesh, _ = walls
    async with sdk_client(mesh, "alice") as (client, _):
        with anyio.fail_after(GUARD):
            events = [e async for e in client.send_message(text_message("Tea?", "walls"))]
    # What a2a-sdk-based clients (ADK's RemoteA2aAgent) do with each artifact event.
    task = Task()
    task.CopyFrom(events[0].task)
    for event in events[1:]:
        if event.HasField("artifact_update"):
            append_artifact_to_task(task, event.artifact_update)
    assert len(task.artifacts) == 1
    reply = "".join(p.text for p in task.artifacts[0].parts)
    assert reply.startswith("Tea, always.")
    final = as_dict(events[-1])["statusUpdate"]["status"]
    assert final["state"] == "TASK_STATE_COMPLETED" and "message" not in final
    said = [
        part.get("text", "")
        for e in map(as_dict, events)
        for part in e.get("statusUpdate", {}).get("status", {}).get("message", {}).get("parts", [])
    ]
    assert reply not in said


async def test_agent_frameworks_a2a_agent_calls_a_multi_tool_agent_and_hears_a_persona_once(
    walls: tuple[Mesh, Booked],
) -> None:
    framework = pytest.importorskip("agent_framework_a2a")
    core = pytest.importorskip("agent_framework")
    mesh, _ = walls
    async with mesh.http() as http:
        travel = framework.A2AAgent(url=mesh.url("held"), http_client=http)
        with anyio.fail_after(GUARD):
            answer = await travel.run("three nights in Bergen")
        assert answer.text == "booked 'three nights in Bergen' for 1 nights"
        alice = framework.A2AAgent(url=mesh.url("alice"), http_client=http)
        with anyio.fail_after(GUARD):
            updates = [u async for u in alice.run("Tea?", stream=True)]
        # What the framework makes of the stream: the reply once, not artifact + status.
        heard = core.AgentResponse.from_updates(updates).text
        assert heard.count("Tea, always.") == 1, heard


async def test_adks_remote_agent_calls_a_multi_tool_agent_and_hears_a_persona_once(
    walls: tuple[Mesh, Booked],
) -> None:
    """ADK's RemoteA2aAgent, through ADK's Runner, in the ADK peer's own process."""
    mesh, booked = walls
    token = mesh.daemon.token
    with anyio.fail_after(GUARD):
        travel, alice = await run_remote(
            token, (mesh.url("held"), "a night in Tromso"), (mesh.url("alice"), "Tea?")
        )
    # Plain text reached the multi-tool agent's text entry.
    assert travel["texts"] == ["booked 'a night in Tromso' for 1 nights"], travel
    assert booked.calls[-1] == {"request": "a night in Tromso", "nights": 1}
    # The persona's reply streamed (pieces as ADK's partial events), and ADK's user hears
    # it once: not again from the task's status.
    heard = "".join(alice["texts"])
    assert heard.startswith("Tea, always.") and heard.count("Tea, always.") == 1, alice
