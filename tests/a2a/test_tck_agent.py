"""The TCK's system under test (scripts/a2a_tck_agent.py) does what each scenario's message-id
prefix asks, over both bindings: the requirements DM-ART-001 (text, file, file-url and data
artifacts) and DM-MSG-001 (a Message answer) the TCK checks with it, and REJECTED."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh import EMBEDDER, AgentSpec, MeshOrchestrator, local_connector
from mesh.a2a import A2aServer, Caller
from transports import HttpRequest

pytestmark = pytest.mark.anyio

_SCRIPT = Path(__file__).parents[2] / "scripts" / "a2a_tck_agent.py"
_V1 = (("a2a-version", "1.0"),)


def _tck_agent() -> Any:
    spec = importlib.util.spec_from_file_location("a2a_tck_agent", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.agent


@pytest.fixture
async def server() -> AsyncIterator[A2aServer]:
    spec = AgentSpec("tck", local_connector(_tck_agent()), metadata={"text_entry": "respond"})
    async with MeshOrchestrator([spec]) as mesh:
        served = A2aServer(mesh)
        async with anyio.create_task_group() as tg:
            await tg.start(served.serve)
            yield served
            tg.cancel_scope.cancel()


async def send(server: A2aServer, prefix: str, rest: bool) -> dict[str, Any]:
    message = {"messageId": f"{prefix}-1", "role": "ROLE_USER", "parts": [{"text": "go"}]}
    caller = Caller("tck", identity=EMBEDDER)
    if rest:
        body = json.dumps({"message": message}).encode()
        request = HttpRequest("POST", "/message:send", _V1, body)
        answer = await server.handle_rest(request, "tck", caller, ("message:send",))
        return dict(json.loads(answer.body))
    call = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    request = HttpRequest("POST", "/", _V1, json.dumps(call).encode())
    answer = await server.handle(request, "tck", caller)
    return dict(json.loads(answer.body)["result"])


@pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http_json"])
async def test_DM_ART_001_and_DM_MSG_001_scenarios(server: A2aServer, rest: bool) -> None:
    with anyio.fail_after(10):
        text = (await send(server, "tck-artifact-text", rest))["task"]
        file = (await send(server, "tck-artifact-file", rest))["task"]
        url = (await send(server, "tck-artifact-file-url", rest))["task"]
        data = (await send(server, "tck-artifact-data", rest))["task"]
        said = await send(server, "tck-message-response", rest)
        rejected = (await send(server, "tck-reject-task", rest))["task"]
        done = (await send(server, "tck-complete-task", rest))["task"]
    assert text["artifacts"][0]["parts"] == [{"text": "Generated text content"}]
    assert file["artifacts"][0]["parts"] == [
        {"raw": "VENLIGZpbGU=", "filename": "output.txt", "mediaType": "text/plain"}
    ]
    assert url["artifacts"][0]["parts"] == [
        {
            "url": "https://example.com/output.txt",
            "filename": "output.txt",
            "mediaType": "text/plain",
        }
    ]
    assert data["artifacts"][0]["parts"] == [{"data": {"key": "value", "count": 42}}]
    assert said["message"]["parts"] == [{"text": "Direct message response"}]
    assert rejected["status"]["state"] == "TASK_STATE_REJECTED"
    assert done["artifacts"][0]["parts"] == [{"text": "Hello from TCK"}]
