"""The OpenAI-compatible provider and a room against a real model (``make test-llm``).

llama.cpp's server with SmolLM2-135M-Instruct runs on loopback (the ``llm``
extra); these tests are marked ``llm`` and deselected from ``make test``.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from mesh import EMBEDDER, AgentSpec, MeshOrchestrator, local_connector
from mesh.demo import _llama
from mesh.demo._llama import LlamaServer, open_llama_server
from mesh.demo.llm import personas, room_spec
from mesh.providers import ChatMessage, ProviderConfig, create_provider
from mesh.rooms import DeltaEvent, MessageEvent, PointEvent, RoomManager, StopReason
from mesh.rooms._budget import CUT_MARK

pytestmark = [pytest.mark.anyio, pytest.mark.llm, pytest.mark.timeout(600)]

#: A tiny model on two shared cores: a reply takes seconds, a room minutes.
GUARD = 300.0
CHAT = [ChatMessage(role="user", content="Name one vegetable that grows well in a pot.")]


@pytest.fixture
async def server() -> AsyncIterator[LlamaServer]:
    async with open_llama_server() as running:
        yield running


def _config(server: LlamaServer, **fields: object) -> ProviderConfig:
    # A reply of 24 tokens took over 60 s (the provider's default) on a loaded machine.
    base: dict[str, object] = {"provider": "openai", "model": server.model, "timeout": GUARD}
    base["base_url"] = server.base_url
    return ProviderConfig(**(base | {"api_key_env": ""} | fields))  # type: ignore[arg-type]


async def test_a_completion_has_the_shape_the_provider_reads(server: LlamaServer) -> None:
    provider = create_provider(_config(server, max_tokens=24, temperature=0.0))
    with anyio.fail_after(GUARD):
        completion = await provider.complete(CHAT, system="You are a gardener.")
    await provider.aclose()
    assert completion.text.strip() and completion.provider == "openai"
    assert completion.model == server.model
    assert completion.finish_reason in {"stop", "length"}
    assert completion.usage.output_tokens is not None and completion.usage.output_tokens > 0


async def test_a_streamed_reply_arrives_in_pieces_that_make_the_whole(server: LlamaServer) -> None:
    provider = create_provider(_config(server, max_tokens=32, temperature=0.0))
    pieces: list[str] = []
    with anyio.fail_after(GUARD):
        completion = await provider.complete(CHAT, on_delta=pieces.append)
    await provider.aclose()
    assert len(pieces) > 3 and "".join(pieces) == completion.text


async def test_a_reply_that_hits_max_tokens_says_so(server: LlamaServer) -> None:
    provider = create_provider(_config(server, max_tokens=3))
    with anyio.fail_after(GUARD):
        streamed = await provider.complete(CHAT, on_delta=lambda _: None)
        whole = await provider.complete(CHAT)
    await provider.aclose()
    assert streamed.finish_reason == "length" and whole.finish_reason == "length"


async def test_a_room_of_two_real_personas_runs_and_stops_with_a_reason(
    server: LlamaServer,
) -> None:
    agents = personas(server, max_tokens=24)
    specs = [AgentSpec(agent.id, local_connector(agent)) for agent in agents]
    deltas, points = 0, []
    with tempfile.TemporaryDirectory() as data_dir, anyio.fail_after(GUARD):
        async with (
            MeshOrchestrator(specs) as mesh,
            RoomManager.for_orchestrator(mesh, data_dir, creator=EMBEDDER) as rooms,
        ):
            room = await rooms.create(room_spec(max_turns=4))
            async with rooms.subscribe_live(room.id) as events:
                async for event in events:
                    deltas += isinstance(event, DeltaEvent) and bool(event.text)
                    if isinstance(event, PointEvent):
                        points.append(event.index)
            snapshot = await rooms.get(room.id)
            transcript = await rooms.transcript(room.id)
    for agent in agents:
        await agent.aclose()
    assert snapshot.stop_reason in {
        StopReason.MAX_TURNS,
        StopReason.NO_IMPROVEMENT,
        StopReason.GOODBYE,
    }
    assert all(isinstance(m, MessageEvent) and m.text for m in transcript)
    assert [m.name for m in transcript[:2]] == ["Ada", "Ben"] and deltas > len(transcript)
    # The demo's agenda: the room opens on its first point, and has moved on, point by point,
    # at the latest after three messages.
    assert points and points == list(range(len(points)))
    if snapshot.stop_reason is StopReason.MAX_TURNS:
        assert len(points) >= 2
    # The reply budget (24 tokens here) cuts most replies: each ends at a sentence, or says so.
    assert all(m.text.endswith((".", "!", "?", '"', CUT_MARK)) for m in transcript)


async def test_the_same_seed_gives_the_same_reply(server: LlamaServer) -> None:
    provider = create_provider(_config(server, max_tokens=24, temperature=0.9))
    with anyio.fail_after(GUARD):
        first = await provider.complete(CHAT, seed=1234)
        again = await provider.complete(CHAT, seed=1234)
    await provider.aclose()
    assert first.text == again.text


async def test_a_port_taken_before_the_server_binds_it_is_given_up_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another process took the picked port first: the server exited with "address already
    # in use", and the start failed with an exception group instead of trying again.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picks = iter([port])
        free = _llama._free_port
        monkeypatch.setattr(_llama, "_free_port", lambda: next(picks, None) or free())
        with anyio.fail_after(GUARD):
            async with open_llama_server() as running:
                assert f":{port}/" not in running.base_url
                provider = create_provider(_config(running, max_tokens=4))
                assert (await provider.complete(CHAT)).text
                await provider.aclose()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


async def test_a_terminated_demo_stops_its_llama_server_too() -> None:
    # A `kill` or a `timeout` ended the demo at once, and left llama.cpp's server running.
    command = [sys.executable, "-m", "mesh.demo.llm", "--turns", "2"]
    async with await anyio.open_process(command, stderr=subprocess.STDOUT) as demo:
        assert demo.stdout is not None
        seen = b""
        with anyio.fail_after(GUARD):
            while b" serves " not in seen:
                seen += await demo.stdout.receive()
        servers = _children(demo.pid)
        assert servers, seen
        demo.send_signal(signal.SIGTERM)
        with anyio.fail_after(GUARD):
            code = await demo.wait()
    assert code == 128 + signal.SIGTERM
    assert _alive(servers) == []
