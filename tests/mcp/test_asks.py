"""An agent's logs and asks, mid-call, reach MCP clients: the mcp SDK's ``Client``
through ``mesh mcp`` (stdio) and the daemon's ``/mcp`` (an SSE answer, the client's
reply POSTed back), with the live echo agent's ``chatter``, ``ask`` and ``think``.
(The TS SDK's client meets the same through the conformance suite's elicitation and
sampling scenarios: tests/mcp/test_conformance_suite.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import types
from mcp.client import Client

from mesh import EMBEDDER, MeshError, MeshOrchestrator
from mesh.testing import Daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.mcp.test_mount import stdio_manifest, wait_mounted
from tests.mcp.test_serve import JSON, daemon_with_echo, mesh_mcp, over_http

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    async with daemon_with_echo(tmp_path_factory.mktemp("mcp-asks")) as shared:
        yield shared


def route(daemon: Daemon, name: str) -> Any:
    return mesh_mcp(daemon) if name == "mesh mcp" else over_http(daemon)


async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.requested_schema["properties"] == {"answer": {"type": "string"}}
    return types.ElicitResult(action="accept", content={"answer": f"blue, to {params.message}"})


async def sample(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    assert params.max_tokens == 100
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="forty-two"),
        model="test-model",
        stop_reason="endTurn",
    )


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")  # 2026-07-28's
@pytest.mark.parametrize("via", ["mesh mcp", "/mcp"])
async def test_an_agents_logs_and_asks_reach_the_mcp_client_and_its_answers_the_agent(
    daemon: Daemon, via: str
) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    client: AbstractAsyncContextManager[Client] = Client(
        route(daemon, via),
        mode="legacy",
        elicitation_callback=elicit,
        sampling_callback=sample,
        logging_callback=on_log,
    )
    async with client as mcp:
        asked = await mcp.call_tool("echo__ask", {"question": "colour?"})
        assert not asked.is_error, asked
        assert asked.structured_content == {"action": "accept", "answer": "blue, to colour?"}
        thought = await mcp.call_tool("echo__think", {"prompt": "the answer?"})
        assert thought.structured_content == {"text": "forty-two", "model": "test-model"}
        await mcp.set_logging_level("warning")
        await mcp.call_tool("echo__chatter", {"message": "filtered out"})
        await mcp.set_logging_level("debug")
        said = await mcp.call_tool("echo__chatter", {"message": "hello"})
        assert said.structured_content == {"message": "hello"}
        # the log line came before the result, on the call's own stream
        assert [(log.level, log.data, log.logger) for log in logs] == [("info", "hello", "echo")]


@pytest.mark.parametrize("via", ["mesh mcp", "/mcp"])
async def test_a_client_that_cannot_be_asked_gets_a_clear_refusal(daemon: Daemon, via: str) -> None:
    async with Client(route(daemon, via), mode="legacy") as mcp:
        refused = await mcp.call_tool("echo__ask", {"question": "colour?"})
        assert refused.is_error
        assert "declared no elicitation capability" in str(refused.content[0])
        assert (await mcp.call_tool("echo__echo", {"message": "alive"})).structured_content == {
            "message": "alive"
        }
    async with Client(route(daemon, via), mode="auto") as modern:  # no initialize at all
        refused = await modern.call_tool("echo__think", {"prompt": "?"})
        assert refused.is_error and "made no initialize handshake" in str(refused.content[0])


async def test_an_answer_to_no_waiting_request_is_refused_and_the_session_lives(
    daemon: Daemon,
) -> None:
    headers = {**JSON, "authorization": f"Bearer {daemon.token}"}
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    async with httpx.AsyncClient(base_url=daemon.http, headers=headers, timeout=30) as http:
        opened = await http.post("/mcp", json=hello)
        session = {"mcp-session-id": opened.headers["mcp-session-id"]}
        late = {"jsonrpc": "2.0", "id": "gone", "result": {"action": "accept", "content": {}}}
        refused = await http.post("/mcp", json=late, headers=session)
        assert refused.status_code == 400
        assert "no request 'gone' of this server waits for an answer" in refused.text
        ping = await http.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=session
        )
        assert ping.status_code == 200 and ping.json()["result"] == {}


async def test_a_call_over_post_rpc_has_its_ask_refused_saying_why(daemon: Daemon) -> None:
    async with daemon.client() as http:
        ask = {"name": "ask", "arguments": {"question": "colour?"}}
        answer = await http.post(
            "/rpc", json={"agent": "echo", "method": "tools/call", "params": ask}
        )
        assert "POST /rpc is one HTTP exchange" in answer.text, answer.text
        echo = {"name": "echo", "arguments": {"message": "alive"}}
        again = await http.post(
            "/rpc", json={"agent": "echo", "method": "tools/call", "params": echo}
        )
        assert again.json() == {"result": {"message": "alive"}}


async def test_a_mounted_servers_logs_and_asks_reach_whoever_called_its_tool(
    tmp_path: Path,
) -> None:
    logs: list[Mapping[str, Any]] = []

    async def person(params: dict[str, Any]) -> dict[str, Any]:
        assert params["message"] == "Your favourite colour?"
        assert params["requestedSchema"]["properties"]["colour"]["type"] == "string"
        return {"action": "accept", "content": {"colour": "teal"}}

    async def model(params: dict[str, Any]) -> dict[str, Any]:
        assert params["messages"][0]["content"]["text"] == "teal"
        return {"role": "assistant", "content": {"type": "text", "text": "lovely"}, "model": "m"}

    stdio_manifest(tmp_path, "2025-11-25")  # 2026-07-28 asks by input_required instead
    async with MeshOrchestrator.from_manifests(tmp_path) as mesh:
        await wait_mounted(mesh)
        me = mesh.acting_for(EMBEDDER)
        answer = await me.call_tool(
            "peer", "ask_colour", {}, on_log=logs.append, on_elicit=person, on_sample=model
        )
        assert answer == {"result": "teal: lovely"}
        assert [(log["level"], log["data"], log.get("logger")) for log in logs] == [
            ("info", "asking for a colour", "peer")
        ]
        with pytest.raises(MeshError, match="takes no elicitation"):
            await me.call_tool("peer", "ask_colour", {})
        assert await me.call_tool("peer", "add", {"a": 1, "b": 2}) == {"result": 3}
