"""The mesh's agents served over A2A to the a2a-sdk's own client (1.0 and 0.3), through a real
daemon on loopback: card, send, stream, get, list, cancel, re-subscribe, and bad input."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from a2a.client import ClientCallContext
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.a2a._mesh import (
    GUARD,
    Mesh,
    as_dict,
    open_mesh,
    sdk_client,
    text_message,
    tool_message,
)
from tests.integration._daemon import serve_in_process

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def mesh(anyio_backend: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mesh]:
    """One daemon for the tests that only read it or look at tasks of their own tokens (the
    ones that wait on ``held``, or list every task, start their own): starting its three
    agents is most of what each of them costs."""
    with pytest.MonkeyPatch.context() as env:
        async with open_mesh(tmp_path_factory.mktemp("serve"), env) as shared:
            yield shared


def rpc(method: str, params: Any, rpc_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


_EVENT = re.compile(rb"id: (\d+)\ndata: (.*?)\n\n")


async def stream_until(
    url: str, token: str, body: dict[str, Any], enough: Any, last_event_id: str = ""
) -> int:
    """POST ``body`` on a raw socket and read its events until ``enough(data)`` (None: the
    first will do); then drop the connection, as a client that goes away does. The id of
    the last event read."""
    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    head = (
        f"POST {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\n"
        f"authorization: Bearer {token}\r\na2a-version: 1.0\r\n"
        f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n"
    )
    if last_event_id:
        head += f"last-event-id: {last_event_id}\r\n"
    head += "\r\n"
    assert parts.hostname is not None and parts.port is not None
    async with await anyio.connect_tcp(parts.hostname, parts.port) as sock:
        await sock.send(head.encode("utf-8") + payload)
        seen, start = b"", 0
        while True:
            seen += await sock.receive()
            for match in _EVENT.finditer(seen, start):
                start = match.end()
                if enough(json.loads(match.group(2))) in (True, None):
                    return int(match.group(1))


async def test_the_card_lists_tools_as_skills_declares_bearer_and_revalidates(mesh: Mesh) -> None:
    async with sdk_client(mesh, "echo") as (_, card):
        assert card.name == "Echo"
        assert {"echo", "sleep", "fail"} <= {s.id for s in card.skills}
        assert card.capabilities.streaming
        assert {i.protocol_version for i in card.supported_interfaces} == {"1.0", "0.3"}
        assert all(i.url == mesh.url("echo") for i in card.supported_interfaces)
        scheme = card.security_schemes["bearer"].http_auth_security_scheme
        assert scheme.scheme == "Bearer"
    async with sdk_client(mesh, "alice") as (_, persona):
        assert [s.id for s in persona.skills] == ["chat"]
    path = "/a2a/echo/.well-known/agent-card.json"
    async with mesh.http() as http, httpx.AsyncClient() as stranger:
        first = await http.get(mesh.daemon.http + path)
        assert first.status_code == 200 and "max-age" in first.headers["cache-control"]
        etag = first.headers["etag"]
        again = await http.get(mesh.daemon.http + path, headers={"if-none-match": etag})
        assert again.status_code == 304 and again.headers["etag"] == etag
        assert (await stranger.get(mesh.daemon.http + path)).status_code == 401
        missing = await http.get(mesh.daemon.http + "/a2a/nobody/.well-known/agent-card.json")
        assert missing.status_code == 404


async def test_send_blocks_for_the_result_or_returns_at_once_and_cancel_reaches_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_mesh(tmp_path, monkeypatch) as mesh:
        async with sdk_client(mesh, "echo", streaming=False) as (client, _):
            events = [e async for e in client.send_message(tool_message("echo", message="hi"))]
            task = events[-1].task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert as_dict(task.artifacts[0])["parts"] == [{"data": {"message": "hi"}}]
            failed = [e async for e in client.send_message(tool_message("fail", message="boom"))]
            assert failed[-1].task.status.state == TaskState.TASK_STATE_FAILED
            assert "boom" in failed[-1].task.status.message.parts[0].text
        async with sdk_client(mesh, "held", streaming=False) as (client, _):
            request = tool_message("hold", seconds=600)
            request.configuration.return_immediately = True
            with anyio.fail_after(GUARD):
                sent = [e async for e in client.send_message(request)]
                task_id = sent[-1].task.id
                assert sent[-1].task.status.state != TaskState.TASK_STATE_COMPLETED
                await mesh.held.started.wait()
                got = await client.get_task(GetTaskRequest(id=task_id))
                assert got.status.state == TaskState.TASK_STATE_WORKING
                cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
                assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
                await mesh.held.cancelled.wait()  # the agent's own handler was cancelled


async def test_a_stream_carries_progress_then_the_result(mesh: Mesh) -> None:
    async with sdk_client(mesh, "echo") as (client, _):
        request = tool_message("sleep", seconds=0.3, progress_every=0.1)
        with anyio.fail_after(GUARD):
            events = [as_dict(e) async for e in client.send_message(request)]
        assert "task" in events[0]
        progress = [
            e["statusUpdate"]["status"]["message"]["parts"][0]["text"]
            for e in events
            if "message" in e.get("statusUpdate", {}).get("status", {})
        ]
        assert progress == ["slept 0.1 of 0.3 s", "slept 0.2 of 0.3 s", "slept 0.3 of 0.3 s"]
        assert events[-2]["artifactUpdate"]["artifact"]["parts"] == [{"data": {"slept": 0.3}}]
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_persona_reply_streams_as_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_mesh(tmp_path, monkeypatch) as mesh, sdk_client(mesh, "alice") as (client, _):
        with anyio.fail_after(GUARD):
            events = [as_dict(e) async for e in client.send_message(text_message("Tea?", "c1"))]
        # The stream opens with the task as it is: pieces written before it opened are in
        # its reply artifact, and the rest come as they are written (the first opening it).
        pieces = [
            part["text"]
            for artifact in events[0]["task"].get("artifacts", [])
            for part in artifact["parts"]
        ]
        pieces += [
            e["artifactUpdate"]["artifact"]["parts"][0]["text"]
            for e in events
            if "artifactUpdate" in e and not e["artifactUpdate"].get("lastChunk")
        ]
        whole = events[-2]["artifactUpdate"]["artifact"]["parts"][0]["text"]
        assert len(pieces) > 1 and "".join(pieces).strip() == whole
        assert whole.startswith("Tea, always.")
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def _progress_values(seconds: float, every: float) -> list[float]:
    """What echo's ``sleep`` reports, computed as it computes them."""
    values, slept = [], 0.0
    while slept < seconds:
        slept += min(every, seconds - slept)
        values.append(slept)
    return values


async def test_a_dropped_stream_is_rejoined_from_its_last_event_with_nothing_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_mesh(tmp_path, monkeypatch) as mesh:
        arguments = {"seconds": 2.0, "progress_every": 0.05}
        body = rpc("SendStreamingMessage", {"message": _raw_tool("sleep", arguments)})
        seen: list[float] = []

        def third_progress(data: dict[str, Any]) -> bool:
            progress = _progress_of(data["result"])
            if progress is not None:
                seen.append(progress)
            return len(seen) == 3

        async with sdk_client(mesh, "echo") as (client, _):
            with anyio.fail_after(GUARD):
                token = mesh.daemon.token
                last = await stream_until(mesh.url("echo"), token, body, third_progress)
                listed = await client.list_tasks(ListTasksRequest())
                task_id = listed.tasks[0].id
                context = ClientCallContext(service_parameters={"Last-Event-ID": str(last)})
                request = SubscribeToTaskRequest(id=task_id)
                rest = [as_dict(e) async for e in client.subscribe(request, context=context)]
            assert "task" not in rest[0], "a cursor in the log is followed from there"
            seen += [p for e in rest if (p := _progress_of(e)) is not None]
            assert seen == _progress_values(2.0, 0.05)
            assert rest[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
            # A finished task has nothing more to say (subscribing is refused, see
            # test_conformance): GetTask holds everything it said.
            late = await client.get_task(GetTaskRequest(id=task_id))
            assert as_dict(late.artifacts[0])["parts"] == [{"data": {"slept": 2.0}}]


_V1 = {"A2A-Version": "1.0"}


def _raw_tool(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    data = {"tool": tool, "arguments": arguments}
    return {"messageId": "raw", "role": "ROLE_USER", "parts": [{"data": data}]}


def _progress_of(result: dict[str, Any]) -> float | None:
    message = result.get("statusUpdate", {}).get("status", {}).get("message")
    if message is None:
        return None
    data = [p["data"] for p in message["parts"] if "data" in p]
    return float(data[0]["progress"]) if data else None


async def test_tasks_are_listed_paged_and_found_only_by_the_token_that_made_them(
    mesh: Mesh,
) -> None:
    ann, bob = await mesh.token("ann"), await mesh.token("bob")
    mine: list[str] = []
    async with sdk_client(mesh, "echo", streaming=False, token=ann) as (client, _):
        for word in ("one", "two", "three"):
            sent = [e async for e in client.send_message(tool_message("echo", message=word))]
            mine.append(sent[-1].task.id)
        page = await client.list_tasks(ListTasksRequest(page_size=2))
        assert [t.id for t in page.tasks] == mine[::-1][:2] and page.total_size == 3
        rest = await client.list_tasks(
            ListTasksRequest(page_size=2, page_token=page.next_page_token)
        )
        assert [t.id for t in rest.tasks] == mine[:1] and not rest.next_page_token
    async with sdk_client(mesh, "echo", token=bob) as (client, _):
        assert list((await client.list_tasks(ListTasksRequest())).tasks) == []
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=mine[0]))
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(CancelTaskRequest(id=mine[0]))
    async with mesh.http(bob) as http:
        body = rpc("SubscribeToTask", {"id": mine[0]})
        refused = await http.post(mesh.url("echo"), json=body, headers=_V1)
        assert refused.json()["error"]["code"] == -32001


async def test_a_0_3_client_speaks_the_old_names_and_shapes(mesh: Mesh) -> None:
    async with sdk_client(mesh, "echo", version="0.3", streaming=False) as (client, _):
        sent = [e async for e in client.send_message(tool_message("echo", message="old"))]
        assert sent[-1].task.status.state == TaskState.TASK_STATE_COMPLETED
        assert as_dict(sent[-1].task.artifacts[0])["parts"] == [{"data": {"message": "old"}}]
        got = await client.get_task(GetTaskRequest(id=sent[-1].task.id))
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
    async with sdk_client(mesh, "echo", version="0.3") as (client, _):
        request = tool_message("sleep", seconds=0.2, progress_every=0.1)
        streamed = [as_dict(e) async for e in client.send_message(request)]
        assert streamed[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    async with mesh.http() as http:  # no A2A-Version header at all: 0.3
        message = {"kind": "message", "messageId": "m", "role": "user"}
        message["parts"] = [
            {"kind": "data", "data": {"tool": "reverse", "arguments": {"text": "ab"}}}
        ]  # type: ignore[assignment]
        answer = (
            await http.post(mesh.url("echo"), json=rpc("message/send", {"message": message}))
        ).json()
        task = answer["result"]
        assert task["kind"] == "task" and task["status"]["state"] == "completed"
        assert task["artifacts"][0]["parts"] == [{"kind": "data", "data": {"text": "ba"}}]
        # A finished task re-joined the 0.3 way is refused as in 1.0.
        again = await http.post(mesh.url("echo"), json=rpc("tasks/resubscribe", {"id": task["id"]}))
        assert again.json()["error"]["code"] == -32004
        newer = await http.post(
            mesh.url("echo"), json=rpc("SendMessage", {}), headers={"A2A-Version": "2.0"}
        )
        assert newer.json()["error"]["code"] == -32009


async def test_bad_input_gets_the_a2a_error_and_the_link_lives(mesh: Mesh) -> None:
    observer = await mesh.token("watcher", role="observer")
    url = mesh.url("echo")
    async with mesh.http() as http:
        cases: list[tuple[bytes, int, str]] = [
            (b'{"jsonrpc": "2.0", "id": 1, "method"', -32700, "not JSON"),
            (b"[1, 2]", -32600, "JSON-RPC 2.0"),
            (json.dumps(rpc("tasks/list", {})).encode(), -32601, "tasks/list"),
            (json.dumps(rpc("GetTask", {"id": 7})).encode(), -32602, "params.id"),
            (json.dumps(rpc("GetTask", {"id": "nope"})).encode(), -32001, "nope"),
            (
                json.dumps(rpc("SendMessage", {"message": {"parts": []}})).encode(),
                -32602,
                "parts",
            ),
            (
                json.dumps(rpc("SendMessage", {"message": text_of("hello")})).encode(),
                -32602,
                '"tool"',
            ),
            (
                json.dumps(rpc("SendMessage", {"message": text_of("x" * 300_000)})).encode(),
                -32600,
                "exceeds",
            ),
            (  # a file part past the message limit (256 KiB)
                json.dumps(rpc("SendMessage", {"message": file_of("A" * 300_000)})).encode(),
                -32600,
                "exceeds",
            ),
            (b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}', -32700, "UTF-8"),
            (b"[" * 50_000 + b"]" * 50_000, -32700, "not JSON"),
            # Digits that str.isdigit takes and int does not: a superscript, 5,000 of them.
            (json.dumps(rpc("ListTasks", {"pageToken": "\u00b2"})).encode(), -32602, "Token"),
            (json.dumps(rpc("ListTasks", {"pageToken": "1" * 5000})).encode(), -32602, "Token"),
        ]
        for body, code, words in cases:
            answer = await http.post(url, content=body, headers=_V1)
            assert answer.status_code == 200, answer.text
            error = answer.json()["error"]
            assert error["code"] == code and words in error["message"], (body[:40], error)
        # The same connection still serves a good call.
        good = await http.post(
            url,
            json=rpc("SendMessage", {"message": _raw_tool("echo", {"message": "ok"})}),
            headers=_V1,
        )
        assert good.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        # A Last-Event-ID that is no event number resumes from now, as none would.
        running = _raw_tool("sleep", {"seconds": 60})
        config = {"returnImmediately": True}
        started = await http.post(
            url, json=rpc("SendMessage", {"message": running, "configuration": config}), headers=_V1
        )
        task_id = started.json()["result"]["task"]["id"]
        subscribe = rpc("SubscribeToTask", {"id": task_id})
        first: list[dict[str, Any]] = []
        with anyio.fail_after(GUARD):
            await stream_until(url, mesh.daemon.token, subscribe, first.append, "\u00b2")
        assert first[0]["result"]["task"]["id"] == task_id
        await http.post(url, json=rpc("CancelTask", {"id": task_id}), headers=_V1)
    async with httpx.AsyncClient() as stranger, mesh.http(observer) as watcher:
        assert (await stranger.post(url, json=rpc("GetTask", {"id": "x"}))).status_code == 401
        assert (await watcher.post(url, json=rpc("GetTask", {"id": "x"}))).status_code == 403


def text_of(text: str) -> dict[str, Any]:
    return {"messageId": "t", "role": "ROLE_USER", "parts": [{"text": text}]}


def file_of(raw: str) -> dict[str, Any]:
    part = {"raw": raw, "mediaType": "text/plain", "filename": "big.txt"}
    return {"messageId": "f", "role": "ROLE_USER", "parts": [part]}


async def test_an_agent_a_token_may_not_call_has_no_card_and_no_endpoint_for_it(
    tmp_path: Path,
) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "vault.toml").write_text(
        'id = "vault"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
        'args = ["-m", "mesh.agents.echo", "--stdio"]\n[access]\ncallers = ["client:ann"]\n'
    )
    async with serve_in_process(manifests, tmp_path / "data") as daemon:
        await daemon.wait_online("vault", timeout=GUARD)
        tokens = {}
        async with daemon.client() as admin:
            for name in ("ann", "bob"):
                made = await admin.post("/tokens", json={"role": "client", "name": name})
                tokens[name] = made.json()["token"]
        card = f"{daemon.http}/a2a/vault/.well-known/agent-card.json"
        body = rpc("SendMessage", {"message": _raw_tool("echo", {"message": "secret"})})
        for name, allowed in (("ann", True), ("bob", False)):
            headers = {"authorization": f"Bearer {tokens[name]}", **_V1}
            async with httpx.AsyncClient(headers=headers, timeout=30) as http:
                got = await http.get(card)
                sent = await http.post(f"{daemon.http}/a2a/vault", json=body)
            assert (got.status_code, sent.status_code) == ((200, 200) if allowed else (403, 403))
            if not allowed:
                assert "access.callers" in sent.json()["error"]["message"]
