"""A2A's HTTP+JSON binding, through a real daemon: the a2a-sdk's own REST client on it (send,
stream, get, list, cancel), the URLs and verbs of §11.3, AIP-193 errors with the §5.4 HTTP
statuses, and the same door as JSON-RPC (tokens, rights, another token's task)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, ListTasksRequest, TaskState

from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.a2a._mesh import GUARD, Mesh, as_dict, open_mesh, sdk_client, tool_message

pytestmark = pytest.mark.anyio

_V1 = {"A2A-Version": "1.0"}
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"


@pytest.fixture(scope="module")
async def mesh(anyio_backend: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mesh]:
    with pytest.MonkeyPatch.context() as env:
        async with open_mesh(tmp_path_factory.mktemp("rest"), env) as shared:
            yield shared


def echo(word: str) -> dict[str, Any]:
    data = {"tool": "echo", "arguments": {"message": word}}
    return {"message": {"messageId": f"m-{word}", "role": "ROLE_USER", "parts": [{"data": data}]}}


async def send(mesh: Mesh, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    async with mesh.http(token) as http:
        answer = await http.post(mesh.url("echo") + "/message:send", json=body, headers=_V1)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    return dict(answer.json())


def assert_aip193(answer: Any, status: int, name: str, reason: str) -> None:
    """HTTP_JSON-ERR-001/-002, HTTP_JSON-STATUS-001: the status, and AIP-193's body."""
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == status and error["status"] == name and error["message"]
    assert error["details"] == [
        {"@type": _ERROR_INFO, "reason": reason, "domain": "a2a-protocol.org", "metadata": {}}
    ]


async def test_the_card_offers_http_json_on_the_same_base_url(mesh: Mesh) -> None:
    async with mesh.http() as http:
        card = (await http.get(mesh.url("echo") + "/.well-known/agent-card.json")).json()
        old = {"A2A-Version": "0.3"}
        legacy = await http.get(mesh.url("echo") + "/.well-known/agent-card.json", headers=old)
    assert {"url": mesh.url("echo"), "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"} in (
        card["supportedInterfaces"]
    )
    legacy_interface = {"url": mesh.url("echo"), "transport": "HTTP+JSON"}
    assert legacy_interface in legacy.json()["additionalInterfaces"]


async def test_the_sdk_rest_client_sends_gets_lists_and_cancels(mesh: Mesh) -> None:
    """HTTP_JSON-URL-001/-002, HTTP_JSON-SVC-001: the reference client over HTTP+JSON."""
    with anyio.fail_after(GUARD):
        async with sdk_client(mesh, "echo", binding="HTTP+JSON", streaming=False) as (client, _):
            events = [e async for e in client.send_message(tool_message("echo", message="hi"))]
            task = events[-1].task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert as_dict(task.artifacts[0])["parts"] == [{"data": {"message": "hi"}}]
            got = await client.get_task(GetTaskRequest(id=task.id))
            assert got.id == task.id and got.status.state == TaskState.TASK_STATE_COMPLETED
            listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
            assert [t.id for t in listed.tasks] == [task.id]
        async with sdk_client(mesh, "held", binding="HTTP+JSON", streaming=False) as (client, _):
            message = tool_message("hold", seconds=60)
            message.configuration.return_immediately = True
            started = [e async for e in client.send_message(message)][-1].task
            await mesh.held.started.wait()
            cancelled = await client.cancel_task(CancelTaskRequest(id=started.id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            await mesh.held.cancelled.wait()


async def test_message_stream_is_server_sent_stream_responses(mesh: Mesh) -> None:
    """HTTP_JSON-SSE-001: each event's data is a StreamResponse, with no JSON-RPC around it."""
    events: list[dict[str, Any]] = []
    with anyio.fail_after(GUARD):
        async with (
            mesh.http() as http,
            http.stream(
                "POST", mesh.url("echo") + "/message:stream", json=echo("flow"), headers=_V1
            ) as answer,
        ):
            assert answer.headers["content-type"].startswith("text/event-stream")
            events.extend(
                [
                    json.loads(line.removeprefix("data: "))
                    async for line in answer.aiter_lines()
                    if line.startswith("data: ")
                ]
            )
    assert "task" in events[0] and "jsonrpc" not in events[0]
    last = events[-1].get("statusUpdate") or events[-1]["task"]
    assert last["status"]["state"] == "TASK_STATE_COMPLETED"
    artifacts = [e["artifactUpdate"]["artifact"] for e in events if "artifactUpdate" in e]
    artifacts += [a for e in events for a in e.get("task", {}).get("artifacts", [])]
    assert artifacts[0]["parts"] == [{"data": {"message": "flow"}}]


async def test_get_task_takes_its_params_from_the_query(mesh: Mesh) -> None:
    """HTTP_JSON-QP-001: camelCase query params (historyLength)."""
    task = (await send(mesh, echo("q")))["task"]
    async with mesh.http() as http:
        url = mesh.url("echo") + f"/tasks/{task['id']}"
        whole = (await http.get(url, headers=_V1)).json()
        none = (await http.get(url, params={"historyLength": "0"}, headers=_V1)).json()
        bad = await http.get(url, params={"historyLength": "many"}, headers=_V1)
    assert whole["id"] == task["id"] and whole["history"]
    assert "history" not in none
    assert_aip193(bad, 400, "INVALID_ARGUMENT", "INVALID_PARAMS")


async def test_errors_are_aip_193_with_the_spec_http_status(mesh: Mesh) -> None:
    """HTTP_JSON-ERR-001, HTTP_JSON-ERR-002, HTTP_JSON-STATUS-001."""
    task = (await send(mesh, echo("done")))["task"]
    base = mesh.url("echo")
    odd = echo("odd")
    odd["message"]["parts"] = [{"raw": "AAAA", "mediaType": "image/png"}]
    async with mesh.http() as http:
        assert_aip193(
            await http.get(base + "/tasks/nope", headers=_V1), 404, "NOT_FOUND", "TASK_NOT_FOUND"
        )
        assert_aip193(
            await http.post(base + f"/tasks/{task['id']}:cancel", headers=_V1),
            409,
            "FAILED_PRECONDITION",
            "TASK_NOT_CANCELABLE",
        )
        assert_aip193(
            await http.post(base + f"/tasks/{task['id']}:subscribe", headers=_V1),
            400,
            "UNIMPLEMENTED",
            "UNSUPPORTED_OPERATION",
        )
        assert_aip193(
            await http.post(base + "/message:send", json=odd, headers=_V1),
            415,
            "INVALID_ARGUMENT",
            "CONTENT_TYPE_NOT_SUPPORTED",
        )
        assert_aip193(
            await http.post(
                base + "/message:send",
                content=b"<x/>",
                headers={**_V1, "Content-Type": "application/xml"},
            ),
            415,
            "INVALID_ARGUMENT",
            "CONTENT_TYPE_NOT_SUPPORTED",
        )
        assert_aip193(
            await http.post(base + "/message:send", content=b"{", headers=_V1),
            400,
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
        )
        assert_aip193(
            await http.post(base + f"/tasks/{task['id']}:frobnicate", headers=_V1),
            404,
            "NOT_FOUND",
            "METHOD_NOT_FOUND",
        )
        assert_aip193(
            await http.get(base + "/extendedAgentCard", headers=_V1),
            400,
            "FAILED_PRECONDITION",
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        )
        assert_aip193(
            await http.get(base + "/tasks", headers={"A2A-Version": "9.9"}),
            400,
            "UNIMPLEMENTED",
            "VERSION_NOT_SUPPORTED",
        )
        big = echo("big")
        big["message"]["parts"] = [{"raw": "A" * (300 * 1024), "mediaType": "text/plain"}]
        assert_aip193(  # a file part past the message limit (256 KiB)
            await http.post(base + "/message:send", json=big, headers=_V1),
            400,
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
        )
        # The link lives: the same client goes on being answered.
        assert (await http.get(base + f"/tasks/{task['id']}", headers=_V1)).status_code == 200


async def test_the_same_door_as_json_rpc(mesh: Mesh) -> None:
    """Another token's task does not exist for it, in either binding; an observer may not
    call; no token is 401."""
    task = (await send(mesh, echo("mine")))["task"]
    other = await mesh.token("rest-other")
    observer = await mesh.token("rest-observer", role="observer")
    url = mesh.url("echo") + f"/tasks/{task['id']}"
    async with mesh.http(other) as http:
        assert_aip193(await http.get(url, headers=_V1), 404, "NOT_FOUND", "TASK_NOT_FOUND")
        listed = (await http.get(mesh.url("echo") + "/tasks", headers=_V1)).json()
        assert task["id"] not in [t["id"] for t in listed["tasks"]]
    async with mesh.http(observer) as http:
        assert (await http.get(url, headers=_V1)).status_code == 403
        refused = await http.post(mesh.url("echo") + "/message:send", json=echo("x"))
        assert refused.status_code == 403
    async with mesh.http() as http:
        http.headers.pop("Authorization")
        assert (await http.get(url, headers=_V1)).status_code == 401
        assert (await http.get(mesh.url("nobody") + "/tasks")).status_code in (401,)
