"""Where the A2A spec is exact, the mesh is too: the error's ``ErrorInfo``, the error codes of
unsupported media and of a subscription to a finished task, an idempotent delete, params under
their ProtoJSON names, and a card a strict 1.0 schema accepts (through a real daemon)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.a2a._mesh import Mesh, open_mesh

pytestmark = pytest.mark.anyio

_V1 = {"A2A-Version": "1.0"}
_CARD = "/.well-known/agent-card.json"


@pytest.fixture(scope="module")
async def mesh(anyio_backend: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mesh]:
    with pytest.MonkeyPatch.context() as env:
        async with open_mesh(tmp_path_factory.mktemp("conformance"), env) as shared:
            yield shared


def rpc(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def echo(word: str, **message: Any) -> dict[str, Any]:
    data = {"tool": "echo", "arguments": {"message": word}}
    return {"messageId": f"m-{word}", "role": "ROLE_USER", "parts": [{"data": data}], **message}


async def call(mesh: Mesh, method: str, params: Any, token: str | None = None) -> dict[str, Any]:
    async with mesh.http(token) as http:
        answer = await http.post(mesh.url("echo"), json=rpc(method, params), headers=_V1)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def test_every_error_holds_an_error_info_naming_its_reason(mesh: Mesh) -> None:
    for method, params, code, reason in (
        ("GetTask", {"id": "nope"}, -32001, "TASK_NOT_FOUND"),
        ("GetTask", {"id": 7}, -32602, "INVALID_PARAMS"),
        ("tasks/list", {}, -32601, "METHOD_NOT_FOUND"),
        ("GetExtendedAgentCard", {}, -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    ):
        error = (await call(mesh, method, params))["error"]
        assert error["code"] == code
        assert error["data"] == [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "a2a-protocol.org",
                "metadata": {},
            }
        ]


async def test_a_part_of_a_media_type_the_agent_does_not_take_is_content_type_not_supported(
    mesh: Mesh,
) -> None:
    strange = {"raw": "dGNr", "mediaType": "application/x-unsupported"}
    message = {"messageId": "m-media", "role": "ROLE_USER", "parts": [strange]}
    error = (await call(mesh, "SendMessage", {"message": message}))["error"]
    assert error["code"] == -32005, error
    assert "application/x-unsupported" in error["message"] and "text/plain" in error["message"]
    # A body that says it is not JSON is refused before it is read.
    async with mesh.http() as http:
        headers = {**_V1, "content-type": "text/plain"}
        refused = await http.post(mesh.url("echo"), content=b"{'not': 'json'}", headers=headers)
    assert refused.json()["error"]["code"] == -32005, refused.text
    assert "Content-Type" in refused.json()["error"]["message"]
    # The modes the card names are taken, whatever their parameters or case.
    message["parts"] = [{"text": "hi", "mediaType": "Text/Plain; charset=utf-8"}]
    answer = await call(mesh, "SendMessage", {"message": message})
    assert answer["error"]["code"] == -32602  # no longer the media: which tool (echo has many)


async def test_a_finished_task_cannot_be_subscribed_to(mesh: Mesh) -> None:
    done = (await call(mesh, "SendMessage", {"message": echo("over")}))["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    error = (await call(mesh, "SubscribeToTask", {"id": done["id"]}))["error"]
    assert error["code"] == -32004 and "TASK_STATE_COMPLETED" in error["message"]
    assert error["data"][0]["reason"] == "UNSUPPORTED_OPERATION"


async def test_deleting_a_push_config_twice_succeeds_twice(mesh: Mesh) -> None:
    done = (await call(mesh, "SendMessage", {"message": echo("pushed")}))["result"]["task"]
    hook = {"taskId": done["id"], "id": "hook", "url": "http://127.0.0.1:9/hook"}
    made = await call(mesh, "CreateTaskPushNotificationConfig", hook)
    assert made["result"]["id"] == "hook", made
    for _ in range(2):
        gone = await call(
            mesh, "DeleteTaskPushNotificationConfig", {"taskId": done["id"], "id": "hook"}
        )
        assert gone == {"jsonrpc": "2.0", "id": 1, "result": {}}
    listed = await call(mesh, "ListTaskPushNotificationConfigs", {"taskId": done["id"]})
    assert listed["result"] == {"configs": []}
    # Another's task (or none) is still not found: idempotence is not a way to probe ids.
    missing = await call(mesh, "DeleteTaskPushNotificationConfig", {"taskId": "nope", "id": "x"})
    assert missing["error"]["code"] == -32001


async def test_params_are_read_under_their_proto_names_too(mesh: Mesh) -> None:
    token = await mesh.token("snake")
    for word in ("one", "two", "three"):
        sent = await call(mesh, "SendMessage", {"message": echo(word, context_id=word)}, token)
        assert sent["result"]["task"]["contextId"] == word
    listed = (await call(mesh, "ListTasks", {"context_id": "two", "page_size": 5}, token))["result"]
    assert [t["contextId"] for t in listed["tasks"]] == ["two"] and listed["pageSize"] == 5
    task_id = listed["tasks"][0]["id"]
    got = (await call(mesh, "GetTask", {"id": task_id, "history_length": 0}, token))["result"]
    assert got["id"] == task_id and "history" not in got
    # The camelCase name wins over its proto twin; the client's own data is left as sent.
    both = {"contextId": "three", "context_id": "one", "include_artifacts": True}
    listed = (await call(mesh, "ListTasks", both, token))["result"]
    assert [t["contextId"] for t in listed["tasks"]] == ["three"]
    assert listed["tasks"][0]["artifacts"][0]["parts"] == [{"data": {"message": "three"}}]
    # (a renamed argument would be refused: a tool takes no field it does not name)
    arguments = {"seconds": 0.01, "progress_every": 0.01}
    data = {"tool": "sleep", "arguments": arguments}
    kept = {"message_id": "m-kept", "role": "ROLE_USER", "parts": [{"data": data}]}
    answer = await call(mesh, "SendMessage", {"message": kept, "metadata": {"a_b": 1}}, token)
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
    assert answer["result"]["task"]["history"][0]["messageId"] == "m-kept"


async def test_CARD_STRUCT_001_the_card_is_strict_1_0_unless_0_3_is_asked_for(mesh: Mesh) -> None:
    """A card is read before a version is agreed: without a header it is 1.0's strict card,
    and only ``A2A-Version: 0.3`` adds the fields a 0.3 client finds the endpoint by."""
    url = mesh.url("echo") + _CARD
    async with mesh.http() as http:
        plain = await http.get(url)
        strict = (await http.get(url, headers=_V1)).json()
        legacy = await http.get(url, headers={"A2A-Version": "0.3"})
    legacy_fields = {"url", "preferredTransport", "protocolVersion", "additionalInterfaces"}
    assert not legacy_fields & set(plain.json()) and plain.json() == strict
    assert strict["supportedInterfaces"][0]["url"] == mesh.url("echo")
    assert legacy.json()["url"] == mesh.url("echo") and legacy.json()["protocolVersion"] == "0.3.0"
    assert plain.headers["vary"] == legacy.headers["vary"] == "A2A-Version"


async def test_CARD_CACHE_003_the_card_is_dated_and_revalidated_by_its_date(mesh: Mesh) -> None:
    """``Last-Modified`` dates the card; ``If-Modified-Since`` at or after it is a ``304``,
    one before it the card, and ``If-None-Match`` is the stronger check when both are sent."""
    url = mesh.url("echo") + _CARD
    async with mesh.http() as http:
        first = await http.get(url)
        date = first.headers["last-modified"]
        again = await http.get(url, headers={"If-Modified-Since": date})
        older = await http.get(url, headers={"If-Modified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"})
        other_tag = {"If-Modified-Since": date, "If-None-Match": '"other"'}
        tagged = await http.get(url, headers=other_tag)
        garbled = await http.get(url, headers={"If-Modified-Since": "yesterday"})
    assert first.status_code == 200 and date.endswith(" GMT")
    assert again.status_code == 304 and again.headers["last-modified"] == date
    assert older.status_code == tagged.status_code == garbled.status_code == 200
    assert older.json() == first.json()
