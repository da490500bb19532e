"""A2A tasks outlive the daemon: a second daemon on the same data directory answers GetTask
(JSON-RPC and HTTP+JSON) and ListTasks for what the first one ran, as it ended; a task still
running when the first stopped is FAILED, saying so; a re-subscriber is told it has finished."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.a2a._mesh import ECHO, GUARD
from tests.a2a.test_serve import stream_until
from tests.integration._daemon import InProcessDaemon, serve_in_process

pytestmark = pytest.mark.anyio

_V1 = {"A2A-Version": "1.0"}


def rpc(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    data = {"tool": tool, "arguments": arguments}
    return {"messageId": f"m-{tool}", "role": "ROLE_USER", "parts": [{"data": data}]}


async def post(daemon: InProcessDaemon, method: str, params: Any) -> dict[str, Any]:
    async with daemon.client() as http:
        answer = await http.post("/a2a/echo", json=rpc(method, params), headers=_V1)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert "result" in body, body
    return dict(body["result"])


async def working(daemon: InProcessDaemon, message: dict[str, Any]) -> dict[str, Any]:
    """Stream ``message`` until its task is WORKING, then go (the task runs on)."""
    body = rpc("SendStreamingMessage", {"message": message})
    seen: dict[str, Any] = {}

    def enough(data: dict[str, Any]) -> bool:
        event = data["result"]
        seen.update(event.get("task", {}))
        status = event.get("statusUpdate", event.get("task", {})).get("status", {})
        return bool(status.get("state") == "TASK_STATE_WORKING")

    await stream_until(f"{daemon.http}/a2a/echo", daemon.token, body, enough)
    return seen


async def test_tasks_are_answered_for_after_a_restart(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "echo.toml").write_text(ECHO)
    data = tmp_path / "data"
    with anyio.fail_after(GUARD):
        async with serve_in_process(manifests, data) as first:
            await first.wait_online("echo", timeout=GUARD)
            sent = await post(first, "SendMessage", {"message": call("echo", message="kept")})
            done = sent["task"]
            running = await working(first, call("sleep", seconds=60))
            asking = await post(first, "SendMessage", {"message": call("ask", question="?")})
            assert asking["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        token = first.token
        async with serve_in_process(manifests, data) as second:
            assert second.token == token
            await second.wait_online("echo", timeout=GUARD)
            again = await post(second, "GetTask", {"id": done["id"]})
            assert again["status"]["state"] == "TASK_STATE_COMPLETED"
            assert again["artifacts"][0]["parts"] == [{"data": {"message": "kept"}}]
            assert again["history"][0]["messageId"] == "m-echo"
            stopped = await post(second, "GetTask", {"id": running["id"]})
            assert stopped["status"]["state"] == "TASK_STATE_FAILED"
            assert "daemon stopped" in stopped["status"]["message"]["parts"][0]["text"]
            # A task waiting for an answer ends as any unfinished one: its call is gone.
            unanswered = await post(second, "GetTask", {"id": asking["task"]["id"]})
            assert unanswered["status"]["state"] == "TASK_STATE_FAILED"
            assert "daemon stopped" in unanswered["status"]["message"]["parts"][0]["text"]
            listed = await post(second, "ListTasks", {})
            kept = {done["id"], running["id"], asking["task"]["id"]}
            assert {t["id"] for t in listed["tasks"]} == kept
            async with second.client() as http:
                rest = await http.get(f"/a2a/echo/tasks/{done['id']}", headers=_V1)
                assert rest.status_code == 200 and rest.json()["id"] == done["id"]
                finished = await http.post(
                    "/a2a/echo",
                    json=rpc("SubscribeToTask", {"id": running["id"]}),
                    headers=_V1,
                )
                assert finished.json()["error"]["code"] == -32004
            # A new task does not take an old one's number: ListTasks still pages newest first.
            new = await post(second, "SendMessage", {"message": call("echo", message="n")})
            listed = await post(second, "ListTasks", {"pageSize": 1})
            assert listed["tasks"][0]["id"] == new["task"]["id"]
