"""Push notifications to a real webhook on loopback: every event, in order, at least once
(a refused delivery is retried), with the client's token and auth, never to a host the
daemon's allow-list (``webhook_hosts``) does not name, and not at all when it names none."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError

from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.a2a._mesh import GUARD, Mesh, open_mesh, sdk_client, tool_message
from tests.integration._daemon import serve_in_process
from transports import HttpRequest, HttpResponse, open_http_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def shared_mesh(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Mesh]:
    """One daemon for the tests that each bring their own webhook and look only at their own
    task: starting its three agents is most of what each of them costs."""
    with pytest.MonkeyPatch.context() as env:
        async with open_mesh(tmp_path_factory.mktemp("push"), env) as mesh:
            yield mesh


class Receiver:
    """A webhook that refuses its first delivery (503) and takes the rest."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[int, dict[str, str], dict[str, Any]]] = []
        self.done = anyio.Event()

    async def handle(self, request: HttpRequest) -> HttpResponse:
        status = 503 if not self.deliveries else 200
        body = json.loads(request.body)
        self.deliveries.append((status, dict(request.headers), body))
        state = body.get("statusUpdate", {}).get("status", {}).get("state")
        if status == 200 and state == "TASK_STATE_COMPLETED":
            self.done.set()
        return HttpResponse(status, b"{}")


def _kind(event: dict[str, Any]) -> str:
    if "statusUpdate" in event:
        status = event["statusUpdate"]["status"]
        said = "".join(p.get("text", "") for p in status.get("message", {}).get("parts", ()))
        return f"{status['state']} {said}".strip()
    return next(iter(event))


async def test_every_event_is_pushed_in_order_at_least_once_with_the_clients_auth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver()
    async with (
        open_mesh(tmp_path, monkeypatch) as mesh,
        open_http_server(receiver.handle, host="127.0.0.1", port=0) as hook,
        sdk_client(mesh, "echo", streaming=False) as (_, card),
        mesh.http() as http,
    ):
        webhook = TaskPushNotificationConfig(
            url=f"{hook.url}/hook",
            token="tok-1",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="cred-1"),
        )
        config = ClientConfig(httpx_client=http, streaming=False, push_notification_config=webhook)
        client = ClientFactory(config).create(card)
        request = tool_message("sleep", seconds=0.3, progress_every=0.1)
        with anyio.fail_after(GUARD):
            sent = [e async for e in client.send_message(request)]
            task_id = sent[-1].task.id
            await receiver.done.wait()
        kinds = [_kind(body) for status, _, body in receiver.deliveries if status == 200]
        assert kinds == [
            "TASK_STATE_WORKING",
            "TASK_STATE_WORKING slept 0.1 of 0.3 s",
            "TASK_STATE_WORKING slept 0.2 of 0.3 s",
            "TASK_STATE_WORKING slept 0.3 of 0.3 s",
            "artifactUpdate",
            "TASK_STATE_COMPLETED",
        ]
        first_refused, first_taken = receiver.deliveries[0], receiver.deliveries[1]
        assert first_refused[0] == 503 and first_refused[2] == first_taken[2]  # sent again
        headers = first_taken[1]
        assert headers["x-a2a-notification-token"] == "tok-1"
        assert headers["authorization"] == "Bearer cred-1"
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert [c.url for c in listed.configs] == [f"{hook.url}/hook"]
        assert not listed.configs[0].authentication.credentials  # never shown back
        config_id = listed.configs[0].id
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
        )
        assert got.token == "tok-1"
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
        )
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert list(listed.configs) == []


async def test_a_webhook_outside_the_allow_list_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        open_mesh(tmp_path, monkeypatch) as mesh,
        sdk_client(mesh, "echo", streaming=False) as (client, card),
    ):
        assert card.capabilities.push_notifications
        sent = [e async for e in client.send_message(tool_message("echo", message="x"))]
        for url in ("http://169.254.169.254/latest", "file:///etc/passwd", "http://u:p@127.0.0.1/"):
            with pytest.raises(InvalidParamsError, match="push url refused"):
                await client.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=sent[-1].task.id, url=url)
                )
        # With the message itself: refused before any task is made.
        request = tool_message("echo", message="y")
        request.configuration.task_push_notification_config.url = "http://10.0.0.1/hook"
        with pytest.raises(InvalidParamsError, match="webhook_hosts"):
            _ = [e async for e in client.send_message(request)]
        listed = await client.list_tasks(ListTasksRequest())
        assert [t.id for t in listed.tasks] == [sent[-1].task.id]


@pytest.mark.parametrize(
    ("token", "credentials"), [("é", "c"), ("t", "line\nbreak"), ("t" * 5000, "c")]
)
async def test_a_webhook_token_a_header_cannot_carry_is_refused_and_the_daemon_goes_on(
    shared_mesh: Mesh, token: str, credentials: str
) -> None:
    # Each value goes in a header of every POST: one HTTP cannot carry used to fail the
    # delivery task, and with it the task group of every client's tasks.
    receiver = Receiver()
    mesh = shared_mesh
    async with (
        open_http_server(receiver.handle, host="127.0.0.1", port=0) as hook,
        sdk_client(mesh, "echo", streaming=False) as (client, _),
    ):
        request = tool_message("echo", message="x")
        webhook = request.configuration.task_push_notification_config
        webhook.url = f"{hook.url}/hook"
        webhook.token = token
        webhook.authentication.scheme = "Bearer"
        webhook.authentication.credentials = credentials
        with anyio.fail_after(GUARD):
            with pytest.raises(InvalidParamsError, match=r"the push .* (printable ASCII|longer)"):
                _ = [e async for e in client.send_message(request)]
            sent = [e async for e in client.send_message(tool_message("echo", message="y"))]
        assert sent[-1].task.status.state == TaskState.TASK_STATE_COMPLETED
        assert receiver.deliveries == []


async def test_a_daemon_whose_operator_named_no_webhook_hosts_offers_no_push(
    tmp_path: Path,
) -> None:
    # Loopback too: a webhook there would make the daemon POST to whatever listens on it.
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "echo.toml").write_text(
        'id = "echo"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
        'args = ["-m", "mesh.agents.echo", "--stdio"]\n'
    )
    async with (
        open_http_server(Receiver().handle, host="127.0.0.1", port=0) as hook,
        serve_in_process(manifests, tmp_path / "data") as daemon,
        daemon.client() as http,
    ):
        await daemon.wait_online("echo", timeout=GUARD)
        card = (await http.get("/a2a/echo/.well-known/agent-card.json")).json()
        assert card["capabilities"]["pushNotifications"] is False
        data = {"tool": "echo", "arguments": {"message": "x"}}
        message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": data}]}
        webhook = {"url": f"{hook.url}/hook"}
        params = {"message": message, "configuration": {"taskPushNotificationConfig": webhook}}
        send = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        sent = await http.post("/a2a/echo", json=send, headers={"A2A-Version": "1.0"})
        assert sent.json()["error"]["code"] == -32003, sent.text
        assert "not offered" in sent.json()["error"]["message"]


async def test_a_follow_up_that_answers_a_question_may_bring_a_webhook(shared_mesh: Mesh) -> None:
    receiver = Receiver()
    data = {"tool": "ask", "arguments": {"question": "colour?"}}
    first = {"messageId": "q", "role": "ROLE_USER", "parts": [{"data": data}]}
    async with (
        open_http_server(receiver.handle, host="127.0.0.1", port=0) as hook,
        shared_mesh.http() as http,
    ):

        async def send(params: dict[str, Any]) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
            answer = await http.post(shared_mesh.url("echo"), json=body, headers=_V1)
            return dict(answer.json()["result"]["task"])

        with anyio.fail_after(GUARD):
            asked = await send({"message": first})
            assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            answer = {"messageId": "a", "role": "ROLE_USER", "taskId": asked["id"]}
            config = {"taskPushNotificationConfig": {"url": f"{hook.url}/hook"}}
            await send({"message": answer | {"parts": [{"text": "red"}]}, "configuration": config})
            await receiver.done.wait()
    kinds = [_kind(body) for status, _, body in receiver.deliveries if status == 200]
    assert kinds == ["TASK_STATE_WORKING", "artifactUpdate", "TASK_STATE_COMPLETED"]


_V1 = {"A2A-Version": "1.0"}
