"""A real A2A agent (the a2a-sdk's own server, a process on loopback) mounted as a mesh agent:
called in process, through ``/rpc`` and ``mesh call``, with progress, cancel and death."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh import (
    EMBEDDER,
    AgentSpec,
    CallTimeout,
    ErrorCode,
    ManifestError,
    MeshError,
    MeshOrchestrator,
    MethodNotFound,
)
from mesh.a2a import a2a_connector
from mesh.manifests import load_manifest
from mesh.rooms import MessageEvent, decode_event
from mesh.testing import spawn_daemon
from tests.a2a._peer import ROOT, spawn_sdk_agent
from tests.integration._daemon import persona_manifest

pytestmark = pytest.mark.anyio

GUARD = 60.0


def manifest(url: str) -> str:
    return f'id = "shouter"\n[transport]\ntype = "http"\nendpoint = "{url}"\nprotocol = "a2a"\n'


async def test_a_mounted_a2a_agent_has_its_skills_as_tools_and_streams_progress() -> None:
    async with spawn_sdk_agent() as peer:
        spec = AgentSpec("shouter", a2a_connector(peer.url, agent="shouter"), transport="http")
        async with MeshOrchestrator([spec]) as mesh:
            with anyio.fail_after(GUARD):
                await mesh.wait_linked()
                info = await mesh.call("shouter", "agent/info", on_behalf_of=EMBEDDER)
                assert info["name"] == "Shouter" and info["protocol"] == "a2a"
                tools = await mesh.list_tools("shouter", on_behalf_of=EMBEDDER)
                assert [t["name"] for t in tools] == ["shout", "count", "trip"]
                assert (
                    await mesh.call_tool("shouter", "shout", {"text": "hi"}, on_behalf_of=EMBEDDER)
                    == "HI"
                )
                heard: list[Any] = []
                counted = await mesh.call_tool(
                    "shouter",
                    "count",
                    {"to": 3, "every": 0.01},
                    on_progress=heard.append,
                    on_behalf_of=EMBEDDER,
                )
                assert counted == {"counted": 3}
                assert [h["message"] for h in heard] == [f"counted {i} of 3" for i in (1, 2, 3)]


async def test_a_card_offering_only_http_json_is_mounted_over_it() -> None:
    async with spawn_sdk_agent(rest=True) as peer:
        spec = AgentSpec("shouter", a2a_connector(peer.url, agent="shouter"), transport="http")
        async with MeshOrchestrator([spec]) as mesh:
            with anyio.fail_after(GUARD):
                await mesh.wait_linked()
                assert (
                    await mesh.call_tool("shouter", "shout", {"text": "hi"}, on_behalf_of=EMBEDDER)
                    == "HI"
                )
                heard: list[Any] = []
                counted = await mesh.call_tool(
                    "shouter",
                    "count",
                    {"to": 2, "every": 0.01},
                    on_progress=heard.append,
                    on_behalf_of=EMBEDDER,
                )
                assert counted == {"counted": 2}
                assert [h["message"] for h in heard] == ["counted 1 of 2", "counted 2 of 2"]


async def test_a_mount_calls_only_the_cards_skills_and_sends_text_beside_data() -> None:
    async with spawn_sdk_agent() as peer:
        spec = AgentSpec("shouter", a2a_connector(peer.url, agent="shouter"), transport="http")
        async with MeshOrchestrator([spec]) as mesh:
            with anyio.fail_after(GUARD):
                await mesh.wait_linked()
                with pytest.raises(MethodNotFound) as refused:
                    await mesh.call_tool("shouter", "book", {"text": "hi"}, on_behalf_of=EMBEDDER)
                assert "no skill 'book'" in refused.value.message
                assert "shout, count" in refused.value.message
                # The text is a text part, the other arguments a data part beside it.
                loud = await mesh.call_tool(
                    "shouter", "shout", {"text": "hi", "volume": 11}, on_behalf_of=EMBEDDER
                )
                assert loud == "HI"


async def test_a_mesh_cancel_becomes_cancel_task_and_a_killed_agent_fails_the_call_at_once() -> (
    None
):
    async with spawn_sdk_agent() as peer:
        spec = AgentSpec("shouter", a2a_connector(peer.url, agent="shouter"), transport="http")
        async with MeshOrchestrator([spec]) as mesh:
            with anyio.fail_after(GUARD):
                await mesh.wait_linked()
                started = anyio.Event()
                async with anyio.create_task_group() as tg:

                    async def count_for_ever() -> None:
                        arguments = {"to": 100_000, "every": 0.05}
                        await mesh.call_tool(
                            "shouter",
                            "count",
                            arguments,
                            on_progress=lambda _: started.set(),
                            on_behalf_of=EMBEDDER,
                        )

                    tg.start_soon(count_for_ever)
                    await started.wait()
                    tg.cancel_scope.cancel()  # the mesh caller gives up...
                assert await peer.wait_cancelled()  # ...and the A2A task was cancelled
                # A mesh deadline that passes is a cancel too.
                quiet = {"to": 100_000, "every": 30}  # no progress to push the deadline out
                with pytest.raises(CallTimeout):
                    await mesh.call_tool(
                        "shouter", "count", quiet, timeout=0.5, on_behalf_of=EMBEDDER
                    )
                with anyio.fail_after(GUARD):
                    while len(peer.cancelled) < 2:
                        await peer.wait_more()
                started = anyio.Event()
                failure: list[MeshError] = []

                async def count_until_killed() -> None:
                    arguments = {"to": 100_000, "every": 0.05}
                    try:
                        await mesh.call_tool(
                            "shouter",
                            "count",
                            arguments,
                            on_progress=lambda _: started.set(),
                            on_behalf_of=EMBEDDER,
                        )
                    except MeshError as exc:  # the mount's ConnectionLost, as its answer
                        failure.append(exc)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(count_until_killed)
                    await started.wait()
                    peer.process.kill()
                # Failed with the link's loss, not after the call's deadline (30 s).
                assert failure and "shouter" in str(failure[0])
                assert failure[0].code == ErrorCode.CONNECTION_LOST


async def test_a_mounted_agent_answers_rpc_mesh_call_and_sits_in_a_room(tmp_path: Path) -> None:
    async with spawn_sdk_agent() as peer:
        manifests = tmp_path / "manifests"
        manifests.mkdir()
        (manifests / "shouter.toml").write_text(manifest(peer.url))
        persona_manifest(manifests, "alice", "Alice", ["I hear you."], 0.0)
        data = ["--data-dir", str(tmp_path / "data")]
        async with spawn_daemon(manifests, extra_args=data) as daemon:
            await daemon.wait_online("shouter", "alice")
            async with daemon.client() as http:
                call = {"agent": "shouter", "method": "tools/call"}
                call["params"] = {"name": "shout", "arguments": {"text": "loud"}}  # type: ignore[assignment]
                answer = await http.post("/rpc", json=call)
                assert answer.json() == {"result": "LOUD"}
                bad = {**call, "params": {"name": "count", "arguments": {"to": "many"}}}
                failed = await http.post("/rpc", json=bad)
                assert failed.status_code == 502 and "invalid literal" in failed.text
            env = {**os.environ, **daemon.env(), "PYTHONPATH": str(ROOT)}
            shouted = await anyio.run_process(
                [sys.executable, "-m", "mesh.cli", "call", "shouter", "shout", "--arg", "text=cli"],
                env=env,
                check=False,
                stderr=subprocess.PIPE,
            )
            assert shouted.returncode == 0 and b"CLI" in shouted.stdout, shouted.stderr
            room = {"id": "tea", "topic": "Tea or coffee?", "members": ["alice", "shouter"]}
            room["limits"] = {"max_turns": 2}  # type: ignore[assignment]
            async with daemon.client() as http:
                assert (await http.post("/rooms", json=room)).status_code == 201
                with anyio.fail_after(GUARD):
                    async with daemon.open_events("/rooms/tea/events") as events:
                        said = await _messages_of(events, "shouter")
            # One contextId per room: the agent names the room's.
            assert "room-tea" in said and "I hear you." in said


async def _messages_of(events: Any, speaker: str) -> str:
    while True:
        event = decode_event(await events.receive())
        if isinstance(event, MessageEvent) and event.agent_id == speaker:
            return event.text


def test_a_manifest_refuses_a2a_over_stdio(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('id = "x"\n[transport]\ntype = "stdio"\ncommand = "x"\nprotocol = "a2a"\n')
    with pytest.raises(ManifestError, match="http"):
        load_manifest(path)
