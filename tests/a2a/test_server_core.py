"""The A2A server in process, on an orchestrator of one local agent: what needs no sockets."""

from __future__ import annotations

import json
from typing import Any, cast

import anyio
import pytest

from mesh import EMBEDDER, Agent, AgentSpec, MeshOrchestrator, local_connector
from mesh.a2a import A2aServer, Caller
from mesh.a2a._mapping import Conversations, Plan
from mesh.a2a._runner import run_task
from mesh.a2a._tasks import TaskStore
from transports import HttpRequest

pytestmark = pytest.mark.anyio


def _request(method: str, params: dict[str, Any]) -> HttpRequest:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return HttpRequest("POST", "/", (("a2a-version", "1.0"),), json.dumps(body).encode())


def _hold() -> dict[str, Any]:
    data = {"tool": "hold", "arguments": {}}
    return {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": data}]}}


async def test_one_client_holds_at_most_max_streams_and_another_is_not_held_back() -> None:
    release = anyio.Event()
    agent = Agent("slow")

    @agent.tool
    async def hold() -> str:
        """Wait for the test."""
        await release.wait()
        return "done"

    async with MeshOrchestrator([AgentSpec("slow", local_connector(agent))]) as mesh:
        server = A2aServer(mesh, max_streams=1)
        async with anyio.create_task_group() as tg:
            await tg.start(server.serve)
            first = await server.handle(
                _request("SendStreamingMessage", _hold()), "slow", Caller("ann", identity=EMBEDDER)
            )
            assert first.stream is not None
            wrote = anyio.Event()
            pieces: list[bytes] = []

            async def write(data: bytes) -> None:
                pieces.append(data)
                wrote.set()

            produce = first.stream

            async def stream() -> None:
                await produce(write)

            tg.start_soon(stream)
            with anyio.fail_after(10):
                await wrote.wait()  # ann's stream is open
            second = await server.handle(
                _request("SendStreamingMessage", _hold()), "slow", Caller("ann", identity=EMBEDDER)
            )
            assert second.status == 429 and b"max_streams" in second.body
            other = await server.handle(
                _request("SendStreamingMessage", _hold()), "slow", Caller("bob", identity=EMBEDDER)
            )
            assert other.status == 200 and other.stream is not None
            release.set()
            with anyio.fail_after(10):
                while b"TASK_STATE_COMPLETED" not in b"".join(pieces):
                    wrote = anyio.Event()
                    await wrote.wait()
            tg.cancel_scope.cancel()


class _BrokenMesh:
    """A mesh whose call fails with what no caller expects (not a MeshError)."""

    async def call(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a fault of ours")


async def test_a_task_whose_run_fails_unexpectedly_fails_alone() -> None:
    # Every client's tasks share one task group: a task that raised would end them all.
    store = TaskStore()
    task = store.create("echo", "ann", None)
    mesh = cast(MeshOrchestrator, _BrokenMesh())
    with anyio.fail_after(10):
        await run_task(
            mesh,
            task,
            Plan("echo"),
            conversations=Conversations(),
            timeout=5,
            on_behalf_of=EMBEDDER,
        )
    assert task.state == "TASK_STATE_FAILED"
    said = task.status_message
    assert said is not None and said["parts"] == [{"text": "the daemon failed this task"}]


async def test_a_card_asked_at_many_hosts_asks_its_agent_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The card names the URL it was asked at (the Host header), but what it says of the
    # agent is asked once: a client changing its Host must not make the daemon call out.
    agent = Agent("echo")

    @agent.tool
    async def echo(message: str) -> str:
        """Say it back."""
        return message

    async with MeshOrchestrator([AgentSpec("echo", local_connector(agent))]) as mesh:
        asked: list[str] = []
        call = mesh.call

        async def counted(target: str, method: str, *args: Any, **kwargs: Any) -> Any:
            asked.append(method)
            return await call(target, method, *args, **kwargs)

        monkeypatch.setattr(mesh, "call", counted)
        server = A2aServer(mesh)
        get = HttpRequest("GET", "/a2a/echo/.well-known/agent-card.json", (), b"")
        for host in ("a.example", "b.example", "a.example"):
            answer = await server.card(get, "echo", f"http://{host}/a2a/echo")
            card = json.loads(answer.body)
            assert card["supportedInterfaces"][0]["url"] == f"http://{host}/a2a/echo"
            assert [skill["id"] for skill in card["skills"]] == ["echo"]
        assert asked == ["agent/info", "tools/list"]
