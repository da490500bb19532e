"""The TCK's system under test (scripts/a2a_tck_agent.py) does what each scenario's message-id
prefix asks, over both bindings: the requirements DM-ART-001 (text, file, file-url and data
artifacts) and DM-MSG-001 (a Message answer) the TCK checks with it, and REJECTED."""

from __future__ import annotations

import contextlib
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


# -- a task that asks: the TCK's ``tck-input-required`` scenario -------------------------------

_OWN = Caller("tck", identity=EMBEDDER)
_REST_PATHS = {
    "SendMessage": ("POST", "message:send"),
    "SendStreamingMessage": ("POST", "message:stream"),
    "GetTask": ("GET", "tasks/{id}"),
    "CancelTask": ("POST", "tasks/{id}:cancel"),
    "SubscribeToTask": ("POST", "tasks/{id}:subscribe"),
}


async def ask(
    server: A2aServer, method: str, params: dict[str, Any], rest: bool, caller: Caller = _OWN
) -> Any:
    """``method`` over either binding: its result, a stream's events, or the error."""
    if rest:
        verb, template = _REST_PATHS[method]
        path = template.format(id=params.get("id", ""))
        query = f"?historyLength={params['historyLength']}" if "historyLength" in params else ""
        body = json.dumps(params).encode() if verb == "POST" and "message" in params else b""
        request = HttpRequest(verb, "/" + path + query, _V1, body)
        answer = await server.handle_rest(request, "tck", caller, tuple(path.split("/")))
    else:
        call = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        request = HttpRequest("POST", "/", _V1, json.dumps(call).encode())
        answer = await server.handle(request, "tck", caller)
    if answer.stream is not None:
        return answer
    got = json.loads(answer.body)
    return got if rest else got.get("result", got)


async def events_of(
    answer: Any, rest: bool, stop_after: int | None = None, opened: anyio.Event | None = None
) -> list[Any]:
    """A stream's events (its JSON-RPC results), to its end or the first ``stop_after``;
    ``opened`` is set at the first."""
    seen: list[Any] = []

    class Enough(Exception):
        pass

    async def write(chunk: bytes) -> None:
        for line in chunk.decode().splitlines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                seen.append(event if rest else event["result"])
                if opened is not None:
                    opened.set()
                if stop_after is not None and len(seen) >= stop_after:
                    raise Enough

    with contextlib.suppress(Enough):
        await answer.stream(write)
    return seen


def message(prefix: str, text: str = "go", **more: Any) -> dict[str, Any]:
    return {"messageId": f"{prefix}-1", "role": "ROLE_USER", "parts": [{"text": text}], **more}


async def waiting_task(server: A2aServer, rest: bool) -> dict[str, Any]:
    sent = await ask(server, "SendMessage", {"message": message("tck-input-required")}, rest)
    task = dict(sent["task"])
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["status"]["message"]["parts"][0] == {"text": "Input required"}
    return task


_BINDINGS = pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http_json"])


@_BINDINGS
async def test_CORE_CANCEL_001_a_task_waiting_for_input_is_cancelled(
    server: A2aServer, rest: bool
) -> None:
    with anyio.fail_after(10):
        task = await waiting_task(server, rest)
        cancelled = await ask(server, "CancelTask", {"id": task["id"]}, rest)
    assert cancelled["id"] == task["id"]
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"


@_BINDINGS
async def test_CORE_MULTI_005_a_follow_up_with_only_the_task_id_is_in_the_tasks_context(
    server: A2aServer, rest: bool
) -> None:
    with anyio.fail_after(10):
        task = await waiting_task(server, rest)
        follow = message("tck-infer-ctx", taskId=task["id"])
        done = (await ask(server, "SendMessage", {"message": follow}, rest))["task"]
    assert done["id"] == task["id"] and done["contextId"] == task["contextId"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["artifacts"][0]["parts"] == [{"text": "Hello from TCK"}]


@_BINDINGS
async def test_CORE_HIST_002_a_multi_turn_tasks_history_is_cut_to_history_length(
    server: A2aServer, rest: bool
) -> None:
    with anyio.fail_after(10):
        task = await waiting_task(server, rest)
        for text in ("TCK history message 1", "TCK history message 2"):
            again = message("tck-input-required", text, taskId=task["id"])
            waiting = (await ask(server, "SendMessage", {"message": again}, rest))["task"]
            assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        last = message("tck-complete-task", "TCK complete after history", taskId=task["id"])
        await ask(server, "SendMessage", {"message": last}, rest)
        whole = await ask(server, "GetTask", {"id": task["id"]}, rest)
        one = await ask(server, "GetTask", {"id": task["id"], "historyLength": 1}, rest)
    said = [p.get("text") for m in whole["history"] for p in m["parts"] if m["role"] == "ROLE_USER"]
    assert said == [
        "go",
        "TCK history message 1",
        "TCK history message 2",
        "TCK complete after history",
    ]
    assert len(one["history"]) == 1


@_BINDINGS
async def test_STREAM_SUB_001_and_002_a_subscription_starts_with_the_task_and_ends_when_it_does(
    server: A2aServer, rest: bool
) -> None:
    with anyio.fail_after(10):
        task = await waiting_task(server, rest)
        stream = await ask(server, "SubscribeToTask", {"id": task["id"]}, rest)
        events: list[Any] = []
        async with anyio.create_task_group() as tg:
            opened = anyio.Event()

            async def subscribe() -> None:
                events.extend(await events_of(stream, rest, opened=opened))

            tg.start_soon(subscribe)
            await opened.wait()
            done = message("tck-complete-task", "Complete", taskId=task["id"])
            await ask(server, "SendMessage", {"message": done}, rest)
    assert events[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@_BINDINGS
async def test_STREAM_ORDER_002_to_004_every_subscriber_gets_the_same_events(
    server: A2aServer, rest: bool
) -> None:
    with anyio.fail_after(10):
        task = await waiting_task(server, rest)
        first = await ask(server, "SubscribeToTask", {"id": task["id"]}, rest)
        second = await ask(server, "SubscribeToTask", {"id": task["id"]}, rest)
        third = await ask(server, "SubscribeToTask", {"id": task["id"]}, rest)
        seen: dict[str, list[Any]] = {}
        async with anyio.create_task_group() as tg:
            opened = [anyio.Event() for _ in range(3)]

            async def read(name: str, stream: Any, stop_after: int | None, i: int) -> None:
                seen[name] = await events_of(stream, rest, stop_after, opened[i])

            tg.start_soon(read, "closed early", first, 1, 0)
            tg.start_soon(read, "second", second, None, 1)
            tg.start_soon(read, "third", third, None, 2)
            for each in opened:
                await each.wait()
            done = message("tck-complete-task", "Complete", taskId=task["id"])
            await ask(server, "SendMessage", {"message": done}, rest)
    assert len(seen["closed early"]) == 1
    assert seen["second"] == seen["third"]
    states = [e["statusUpdate"]["status"]["state"] for e in seen["second"] if "statusUpdate" in e]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
