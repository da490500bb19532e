"""A tool's files and resources reach an A2A client as file parts and artifacts of their own,
a tool that declines a task ends it REJECTED, one may answer with a Message, and one that
declares ``a2a`` sees the request's context (an orchestrator of real agents, served by
A2aServer over both bindings)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec
import pytest

from mesh import EMBEDDER, Agent, AgentSpec, MeshOrchestrator, ToolError, local_connector
from mesh.a2a import A2aServer, Caller
from mesh.content import EmbeddedResource, Image, Item, ResourceLink, Text
from transports import HttpRequest

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n"
_V1 = (("a2a-version", "1.0"),)


def studio() -> Agent:
    agent = Agent("studio")

    @agent.tool
    def draw(subject: str) -> list[Text | Image | ResourceLink]:
        """A picture, and where the full-size one is."""
        return [
            Text(f"a drawing of {subject}"),
            Image(PNG, "image/png"),
            ResourceLink(uri="https://files.test/big.png", name="full size", mime_type="image/png"),
        ]

    @agent.tool
    def paint(subject: str) -> str:
        """Paint (but never a wall)."""
        if subject == "wall":
            raise ToolError("I do not paint walls", data={"type": "Rejected"})
        raise ToolError("out of paint")

    @agent.tool
    def whoami(text: str, a2a: dict[str, Any] | None = None) -> dict[str, Any]:
        """Say what the request's A2A context was."""
        return {"text": text, "a2a": a2a}

    @agent.tool
    def note(text: str) -> dict[str, str]:
        """Answer with a message, not a task."""
        return {"$message": f"noted: {text}"}

    return agent


@pytest.fixture
async def server() -> AsyncIterator[A2aServer]:
    async with MeshOrchestrator([AgentSpec("studio", local_connector(studio()))]) as mesh:
        served = A2aServer(mesh)
        async with anyio.create_task_group() as tg:
            await tg.start(served.serve)
            yield served
            tg.cancel_scope.cancel()


def message(tool: str, **arguments: Any) -> dict[str, Any]:
    data = {"tool": tool, "arguments": arguments}
    return {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"data": data}]}}


async def answer_rpc(server: A2aServer, body: dict[str, Any]) -> dict[str, Any]:
    call = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": body}
    request = HttpRequest("POST", "/", _V1, json.dumps(call).encode())
    answer = await server.handle(request, "studio", Caller("me", identity=EMBEDDER))
    return dict(json.loads(answer.body)["result"])


async def answer_rest(server: A2aServer, body: dict[str, Any]) -> dict[str, Any]:
    request = HttpRequest("POST", "/message:send", _V1, json.dumps(body).encode())
    caller = Caller("me", identity=EMBEDDER)
    answer = await server.handle_rest(request, "studio", caller, ("message:send",))
    assert answer.status == 200, answer.body
    return dict(json.loads(answer.body))


async def send_rpc(server: A2aServer, body: dict[str, Any]) -> dict[str, Any]:
    return dict((await answer_rpc(server, body))["task"])


async def send_rest(server: A2aServer, body: dict[str, Any]) -> dict[str, Any]:
    return dict((await answer_rest(server, body))["task"])


@pytest.mark.parametrize("send", [send_rpc, send_rest])
async def test_DM_ART_001_files_are_file_parts_and_a_link_is_an_artifact_of_its_own(
    server: A2aServer, send: Any
) -> None:
    """DM-ART-001 and DM-PART-001 with files: raw bytes with their media type, a url."""
    with anyio.fail_after(10):
        task = await send(server, message("draw", subject="a cat"))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    result, link = task["artifacts"]
    assert result["name"] == "result"
    assert result["parts"] == [
        {"text": "a drawing of a cat"},
        {"raw": base64.b64encode(PNG).decode(), "mediaType": "image/png"},
    ]
    assert link["name"] == "full size"
    assert link["parts"] == [
        {"url": "https://files.test/big.png", "filename": "full size", "mediaType": "image/png"}
    ]
    assert result["artifactId"] != link["artifactId"]


@pytest.mark.parametrize("send", [send_rpc, send_rest])
async def test_a_tool_that_declines_rejects_the_task_and_one_that_fails_fails_it(
    server: A2aServer, send: Any
) -> None:
    with anyio.fail_after(10):
        rejected = await send(server, message("paint", subject="wall"))
        failed = await send(server, message("paint", subject="door"))
    assert rejected["status"]["state"] == "TASK_STATE_REJECTED"
    assert rejected["status"]["message"]["parts"][0]["text"].startswith("I do not paint walls")
    assert failed["status"]["state"] == "TASK_STATE_FAILED"


@pytest.mark.parametrize("answer", [answer_rpc, answer_rest])
async def test_DM_MSG_001_a_tool_may_answer_with_a_message_not_a_task(
    server: A2aServer, answer: Any
) -> None:
    with anyio.fail_after(10):
        said = await answer(server, message("note", text="milk"))
    assert set(said) == {"message"}
    reply = said["message"]
    assert reply["role"] == "ROLE_AGENT" and reply["messageId"]
    assert reply["parts"] == [{"text": "noted: milk"}]


@pytest.mark.parametrize("send", [send_rpc, send_rest])
async def test_a_tool_that_declares_a2a_sees_the_request_context(
    server: A2aServer, send: Any
) -> None:
    body = message("whoami", text="hi", a2a={"messageId": "forged"})
    body["message"].update(messageId="m-ctx", contextId="c-1", metadata={"k": "v"})
    body["message"]["parts"] += [
        {"url": "https://files.test/a.txt", "filename": "a.txt", "mediaType": "text/plain"},
        {"raw": base64.b64encode(b"{}").decode(), "mediaType": "application/json"},
    ]
    body["metadata"] = {"timeout": 5}
    with anyio.fail_after(10):
        task = await send(server, body)
    seen = task["artifacts"][0]["parts"][0]["data"]
    assert seen["text"] == "hi"
    assert seen["a2a"] == {
        "messageId": "m-ctx",  # the server's, never the client's own `a2a` argument
        "contextId": "c-1",
        "taskId": task["id"],
        "referenceTaskIds": [],
        "metadata": {"k": "v"},
        "requestMetadata": {"timeout": 5},
        "files": [
            {
                "type": "resource_link",
                "uri": "https://files.test/a.txt",
                "name": "a.txt",
                "mimeType": "text/plain",
            },
            {
                "type": "resource",
                "resource": {
                    "uri": "a2a:part/2/part-2",
                    "blob": "e30=",
                    "mimeType": "application/json",
                },
            },
        ],
    }
    # Each is a content item a tool can read as one.
    items = [msgspec.convert(f, Item, strict=False) for f in seen["a2a"]["files"]]
    assert isinstance(items[0], ResourceLink) and isinstance(items[1], EmbeddedResource)
    assert items[1].resource.blob == b"{}"
