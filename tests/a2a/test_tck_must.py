"""Every MUST requirement the A2A TCK checks, a test named by its id, on both bindings where
the requirement is a method's (JSON-RPC and HTTP+JSON), against the TCK's own system under
test (scripts/a2a_tck_agent.py) served by an :class:`~mesh.a2a.A2aServer`.

The TCK is not on a registry, so CI cannot run it; these hold what it checks. Requirements
tested elsewhere are named there: CARD-STRUCT-001 (tests/a2a/test_conformance.py), DM-ART-001,
DM-MSG-001, CORE-CANCEL-001, CORE-MULTI-005, CORE-HIST-002, STREAM-SUB-001 and STREAM-ORDER-002
(tests/a2a/test_tck_agent.py), HTTP_JSON-* (tests/a2a/test_rest.py)."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import anyio
import pytest

from mesh import EMBEDDER, AgentSpec, MeshOrchestrator, local_connector
from mesh.a2a import A2aServer, Caller
from tests.a2a.test_tck_agent import _tck_agent
from transports import HttpRequest, HttpResponse, open_http_server

pytestmark = pytest.mark.anyio

_V1 = (("a2a-version", "1.0"),)
_OWN = Caller("tck", identity=EMBEDDER)
_OTHER = Caller("someone else", identity=EMBEDDER)
_BINDINGS = pytest.mark.parametrize("rest", [False, True], ids=["jsonrpc", "http_json"])
_ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
_STATES = {
    "TASK_STATE_" + s
    for s in [
        *("SUBMITTED", "WORKING", "INPUT_REQUIRED", "AUTH_REQUIRED"),
        *("COMPLETED", "FAILED", "CANCELED", "REJECTED"),
    ]
}
_PUSH = "pushNotificationConfigs"
_REST: dict[str, tuple[str, str]] = {
    "SendMessage": ("POST", "message:send"),
    "SendStreamingMessage": ("POST", "message:stream"),
    "GetTask": ("GET", "tasks/{id}"),
    "ListTasks": ("GET", "tasks"),
    "CancelTask": ("POST", "tasks/{id}:cancel"),
    "SubscribeToTask": ("POST", "tasks/{id}:subscribe"),
    "CreateTaskPushNotificationConfig": ("POST", "tasks/{taskId}/" + _PUSH),
    "GetTaskPushNotificationConfig": ("GET", "tasks/{taskId}/" + _PUSH + "/{id}"),
    "ListTaskPushNotificationConfigs": ("GET", "tasks/{taskId}/" + _PUSH),
    "DeleteTaskPushNotificationConfig": ("DELETE", "tasks/{taskId}/" + _PUSH + "/{id}"),
    "GetExtendedAgentCard": ("GET", "extendedAgentCard"),
}
_IN_PATH = ("id", "taskId")


@dataclass
class Hook:
    """A webhook on loopback that keeps what it is sent."""

    url: str = ""
    deliveries: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    completed: anyio.Event = field(default_factory=anyio.Event)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        body = json.loads(request.body)
        self.deliveries.append((dict(request.headers), body))
        if body.get("statusUpdate", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED":
            self.completed.set()
        return HttpResponse(200, b"{}")


@dataclass
class Sut:
    server: A2aServer
    hook: Hook


@pytest.fixture
async def sut() -> AsyncIterator[Sut]:
    spec = AgentSpec("tck", local_connector(_tck_agent()), metadata={"text_entry": "respond"})
    hook = Hook()
    async with (
        MeshOrchestrator([spec]) as mesh,
        open_http_server(hook.handle, host="127.0.0.1", port=0) as webhook,
        anyio.create_task_group() as tg,
    ):
        hook.url = f"{webhook.url}/hook"
        served = A2aServer(mesh, check_push_url=lambda url: None)
        await tg.start(served.serve)
        yield Sut(served, hook)
        tg.cancel_scope.cancel()


@dataclass(frozen=True)
class Answer:
    """One answer as either binding gives it: ``result`` (JSON-RPC's result, HTTP+JSON's
    body), or ``code`` (the A2A error code, read back from HTTP+JSON's ErrorInfo)."""

    status: int
    body: Any
    response: HttpResponse
    result: Any = None
    code: int | None = None


_REASON_CODES = {
    "TASK_NOT_FOUND": -32001,
    "TASK_NOT_CANCELABLE": -32002,
    "PUSH_NOTIFICATION_NOT_SUPPORTED": -32003,
    "UNSUPPORTED_OPERATION": -32004,
    "CONTENT_TYPE_NOT_SUPPORTED": -32005,
    "EXTENDED_AGENT_CARD_NOT_CONFIGURED": -32007,
    "VERSION_NOT_SUPPORTED": -32009,
    "INVALID_PARAMS": -32602,
    "METHOD_NOT_FOUND": -32601,
}


async def ask(
    sut: Sut,
    method: str,
    params: dict[str, Any],
    rest: bool,
    caller: Caller = _OWN,
    headers: tuple[tuple[str, str], ...] = _V1,
) -> Answer:
    """``method`` over either binding."""
    if rest:
        verb, template = _REST[method]
        path = template.format(**{k: params.get(k, "") for k in _IN_PATH})
        rest_of = {k: v for k, v in params.items() if "{" + k + "}" not in template}
        flags = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in rest_of.items()}
        query = "?" + urlencode(flags) if verb == "GET" and rest_of else ""
        body = json.dumps(rest_of).encode() if verb == "POST" else b""
        request = HttpRequest(verb, "/" + path + query, headers, body)
        answer = await sut.server.handle_rest(request, "tck", caller, tuple(path.split("/")))
    else:
        call = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        request = HttpRequest("POST", "/", headers, json.dumps(call).encode())
        answer = await sut.server.handle(request, "tck", caller)
    if answer.stream is not None:
        return Answer(answer.status, None, answer)
    got: Any = json.loads(answer.body) if answer.body else None
    if rest:
        if answer.status == 200:
            return Answer(answer.status, got, answer, result=got)
        reason = got["error"]["details"][0]["reason"]
        return Answer(answer.status, got, answer, code=_REASON_CODES.get(reason, 0))
    error = got.get("error")
    return Answer(answer.status, got, answer, got.get("result"), error and error["code"])


async def events_of(
    answer: Answer,
    rest: bool,
    until: Callable[[dict[str, Any]], bool] | None = None,
    opened: anyio.Event | None = None,
) -> list[Any]:
    """A stream's events (each a StreamResponse), to its end or the first ``until`` holds of
    (then the reader leaves, closing its stream); ``opened`` is set at the first."""
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
                if until is not None and until(seen[-1]):
                    raise Enough

    assert answer.response.stream is not None
    with contextlib.suppress(Enough):
        await answer.response.stream(write)
    return seen


def message(prefix: str, text: str = "go", **more: Any) -> dict[str, Any]:
    return {"messageId": f"{prefix}-1", "role": "ROLE_USER", "parts": [{"text": text}], **more}


async def send(sut: Sut, prefix: str, rest: bool, **params: Any) -> Answer:
    return await ask(sut, "SendMessage", {"message": message(prefix), **params}, rest)


async def finished_task(sut: Sut, rest: bool) -> dict[str, Any]:
    task = dict((await send(sut, "tck-complete-task", rest)).result["task"])
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    return task


async def waiting_task(sut: Sut, rest: bool) -> dict[str, Any]:
    task = dict((await send(sut, "tck-input-required", rest)).result["task"])
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    return task


def walk(value: Any) -> list[tuple[str, Any]]:
    """Every key of a JSON value, at any depth, with its value."""
    if isinstance(value, dict):
        return [(k, v) for k, v in value.items()] + [p for v in value.values() for p in walk(v)]
    if isinstance(value, list):
        return [p for v in value for p in walk(v)]
    return []


# -- SendMessage and SendStreamingMessage (§3.1.1, §3.1.2) -----------------------------------------


@_BINDINGS
async def test_CORE_SEND_001_send_returns_a_task_or_a_message(sut: Sut, rest: bool) -> None:
    with anyio.fail_after(10):
        task = await send(sut, "tck-complete-task", rest)
        said = await send(sut, "tck-message-response", rest)
    assert set(task.result) == {"task"} and set(said.result) == {"message"}


@_BINDINGS
async def test_CORE_SEND_002_a_message_to_a_finished_task_is_unsupported(
    sut: Sut, rest: bool
) -> None:
    with anyio.fail_after(10):
        task = await finished_task(sut, rest)
        again = await ask(sut, "SendMessage", {"message": message("x", taskId=task["id"])}, rest)
    assert again.code == -32004 and "TASK_STATE_COMPLETED" in json.dumps(again.body)
    assert (await ask(sut, "GetTask", {"id": task["id"]}, rest)).result["status"] == task["status"]


@_BINDINGS
async def test_CORE_SEND_003_a_part_of_a_media_type_not_taken_is_content_type_not_supported(
    sut: Sut, rest: bool
) -> None:
    part = {"raw": "dGNr", "mediaType": "application/x-unsupported-tck-type"}
    odd = {"messageId": "tck-send-003-1", "role": "ROLE_USER", "parts": [part]}
    with anyio.fail_after(10):
        refused = await ask(sut, "SendMessage", {"message": odd}, rest)
        listed = await ask(sut, "ListTasks", {}, rest)
    assert refused.code == -32005 and (not rest or refused.status == 415)
    assert "text/plain, application/json" in json.dumps(refused.body)
    assert listed.result["tasks"] == []  # refused before any task was made


@_BINDINGS
async def test_CORE_STREAM_001_and_003_a_stream_opens_with_the_task_and_closes_at_its_end(
    sut: Sut, rest: bool
) -> None:
    """CORE-STREAM-001, CORE-STREAM-003."""
    with anyio.fail_after(10):
        stream = await ask(sut, "SendStreamingMessage", {"message": message("tck-stream")}, rest)
        events = await events_of(stream, rest)
    assert stream.response.content_type == "text/event-stream"
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all("statusUpdate" in e or "artifactUpdate" in e for e in events[1:])


@_BINDINGS
async def test_CORE_STREAM_002_a_message_answer_streams_as_one_message(
    sut: Sut, rest: bool
) -> None:
    with anyio.fail_after(10):
        said = message("tck-message-response")
        stream = await ask(sut, "SendStreamingMessage", {"message": said}, rest)
        events = await events_of(stream, rest)
    # The stream has begun with the task before the tool answered; the message then is
    # the status message of COMPLETED, and the stream closes there.
    done = events[-1]["statusUpdate"]["status"]
    assert done["state"] == "TASK_STATE_COMPLETED"
    assert done["message"]["parts"] == [{"text": "Direct message response"}]


@_BINDINGS
async def test_CORE_EXECUTION_MODE_001_blocking_waits_for_an_end_or_a_question(
    sut: Sut, rest: bool
) -> None:
    with anyio.fail_after(10):
        done = await finished_task(sut, rest)
        asked = await waiting_task(sut, rest)
    assert done["artifacts"][0]["parts"] == [{"text": "Hello from TCK"}]
    assert asked["status"]["message"]["parts"][0] == {"text": "Input required"}


@_BINDINGS
async def test_CORE_EXECUTION_MODE_002_return_immediately_answers_as_the_task_starts(
    sut: Sut, rest: bool
) -> None:
    at_once = {"returnImmediately": True}
    with anyio.fail_after(10):
        started = await send(sut, "tck-input-required", rest, configuration=at_once)
        task = started.result["task"]
        stream = await ask(sut, "SubscribeToTask", {"id": task["id"]}, rest)
        events = await events_of(stream, rest, until=asked)
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert asked(events[-1])  # the work went on after the answer


def asked(event: dict[str, Any]) -> bool:
    status = (event.get("task") or event.get("statusUpdate") or {}).get("status", {})
    return bool(status.get("state") == "TASK_STATE_INPUT_REQUIRED")


# -- GetTask, ListTasks, CancelTask (§3.1.3 to §3.1.5) ---------------------------------------------


@_BINDINGS
async def test_CORE_GET_001_get_task_returns_its_state_artifacts_and_history(
    sut: Sut, rest: bool
) -> None:
    with anyio.fail_after(10):
        task = await finished_task(sut, rest)
        got = (await ask(sut, "GetTask", {"id": task["id"]}, rest)).result
    assert got["id"] == task["id"] and got["status"] == task["status"]
    assert got["artifacts"] == task["artifacts"]
    assert got["history"][0]["messageId"] == "tck-complete-task-1"


@_BINDINGS
@pytest.mark.parametrize(
    ("requirement", "method"),
    [
        ("CORE-GET-002", "GetTask"),
        ("CORE-CANCEL-003", "CancelTask"),
        ("STREAM-SUB-004", "SubscribeToTask"),
    ],
)
async def test_CORE_GET_002_CORE_CANCEL_003_STREAM_SUB_004_an_unknown_task_is_not_found(
    sut: Sut, rest: bool, requirement: str, method: str
) -> None:
    """Another caller's task is not found either, exactly as one that never was."""
    with anyio.fail_after(10):
        theirs = await waiting_task(sut, rest)
        missing = await ask(sut, method, {"id": "no-such-task"}, rest)
        hidden = await ask(sut, method, {"id": theirs["id"]}, rest, caller=_OTHER)
    assert missing.code == hidden.code == -32001, requirement
    assert not rest or missing.status == hidden.status == 404


@_BINDINGS
async def test_CORE_LIST_001_a_caller_lists_only_its_own_tasks(sut: Sut, rest: bool) -> None:
    with anyio.fail_after(10):
        mine = await finished_task(sut, rest)
        other = {"message": message("tck-complete-task")}
        theirs = await ask(sut, "SendMessage", other, rest, _OTHER)
        listed = (await ask(sut, "ListTasks", {}, rest)).result
    assert [t["id"] for t in listed["tasks"]] == [mine["id"]]
    assert theirs.result["task"]["id"] != mine["id"]


@_BINDINGS
async def test_CORE_LIST_002_to_004_pages_by_cursor_newest_first_ending_with_an_empty_token(
    sut: Sut, rest: bool
) -> None:
    with anyio.fail_after(10):
        made = [(await finished_task(sut, rest))["id"] for _ in range(3)]
        first = (await ask(sut, "ListTasks", {"pageSize": 2}, rest)).result
        token = first["nextPageToken"]
        last = (await ask(sut, "ListTasks", {"pageSize": 2, "pageToken": token}, rest)).result
    listed = [t["id"] for t in first["tasks"] + last["tasks"]]
    assert listed == made[::-1] and token  # CORE-LIST-003: the latest status first
    times = [t["status"]["timestamp"] for t in first["tasks"] + last["tasks"]]
    assert times == sorted(times, reverse=True)
    assert last["nextPageToken"] == ""  # CORE-LIST-004: present, and empty at the end


@_BINDINGS
async def test_CORE_LIST_005_artifacts_are_left_out_unless_asked_for(sut: Sut, rest: bool) -> None:
    with anyio.fail_after(10):
        await finished_task(sut, rest)
        plain = (await ask(sut, "ListTasks", {}, rest)).result["tasks"]
        whole = (await ask(sut, "ListTasks", {"includeArtifacts": True}, rest)).result["tasks"]
    assert "artifacts" not in plain[0] and whole[0]["artifacts"]


@_BINDINGS
async def test_CORE_CANCEL_002_a_finished_task_is_not_cancelable(sut: Sut, rest: bool) -> None:
    with anyio.fail_after(10):
        task = await finished_task(sut, rest)
        refused = await ask(sut, "CancelTask", {"id": task["id"]}, rest)
    assert refused.code == -32002 and (not rest or refused.status == 409)


# -- errors and input (§3.2, §3.3) -----------------------------------------------------------------


@_BINDINGS
async def test_CORE_ERR_001_and_002_params_are_checked_first_and_refusals_say_what(
    sut: Sut, rest: bool
) -> None:
    """CORE-ERR-001, CORE-ERR-002."""
    no_parts = {"messageId": "m-1", "role": "ROLE_USER", "parts": []}
    with anyio.fail_after(10):
        empty = await ask(sut, "SendMessage", {"message": no_parts}, rest)
        bad_size = await ask(sut, "ListTasks", {"pageSize": 1000}, rest)
        listed = (await ask(sut, "ListTasks", {}, rest)).result
    for refused in (empty, bad_size):
        assert refused.code == -32602, refused.body
        said = refused.body["error"]["message"]
        assert len(said) > 20, said  # actionable: it says what is wrong
    assert "pageSize" in bad_size.body["error"]["message"]
    assert listed["tasks"] == []  # nothing was started by a refused message


@_BINDINGS
async def test_CORE_CAP_001_push_is_refused_where_the_card_offers_none(rest: bool) -> None:
    spec = AgentSpec("tck", local_connector(_tck_agent()), metadata={"text_entry": "respond"})
    async with MeshOrchestrator([spec]) as mesh, anyio.create_task_group() as tg:
        served = A2aServer(mesh)  # no check_push_url: push is not offered
        await tg.start(served.serve)
        sut = Sut(served, Hook())
        task = await finished_task(sut, rest)
        card = json.loads((await served.card(HttpRequest("GET", "/", _V1, b""), "tck", "u")).body)
        config = {"taskId": task["id"], "url": "http://127.0.0.1:1/hook"}
        refused = await ask(sut, "CreateTaskPushNotificationConfig", config, rest)
        tg.cancel_scope.cancel()
    assert card["capabilities"]["pushNotifications"] is False
    assert refused.code == -32003


@_BINDINGS
async def test_CORE_CAP_003_the_extended_card_is_unsupported(sut: Sut, rest: bool) -> None:
    with anyio.fail_after(10):
        refused = await ask(sut, "GetExtendedAgentCard", {}, rest)
        card = await sut.server.card(HttpRequest("GET", "/", _V1, b""), "tck", "http://x/a2a/tck")
    assert "extendedAgentCard" not in json.loads(card.body)["capabilities"]
    assert refused.code in (-32004, -32007)


# -- contexts and tasks (§3.4) ---------------------------------------------------------------------


@_BINDINGS
async def test_CORE_MULTI_001a_and_003_a_new_task_has_a_new_id_and_its_context(
    sut: Sut, rest: bool
) -> None:
    """CORE-MULTI-001a, CORE-MULTI-003."""
    with anyio.fail_after(10):
        one = await finished_task(sut, rest)
        two = await finished_task(sut, rest)
        said = (await send(sut, "tck-message-response", rest)).result["message"]
    assert one["id"] and two["id"] and one["id"] != two["id"]
    assert one["contextId"] and one["contextId"] != two["contextId"] and said["contextId"]


@_BINDINGS
async def test_CORE_MULTI_002a_and_006_a_context_not_the_tasks_is_refused_and_none_is_made(
    sut: Sut, rest: bool
) -> None:
    """CORE-MULTI-002a, CORE-MULTI-006."""
    with anyio.fail_after(10):
        task = await waiting_task(sut, rest)
        wrong = message("tck-complete-task", taskId=task["id"], contextId="not-its-context")
        refused = await ask(sut, "SendMessage", {"message": wrong}, rest)
        still = (await ask(sut, "GetTask", {"id": task["id"]}, rest)).result
    assert refused.code == -32602 and "contextId" in json.dumps(refused.body)
    assert refused.result is None  # no task, no new contextId
    assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


@_BINDINGS
async def test_CORE_MULTI_004_a_message_to_an_unknown_task_is_not_found(
    sut: Sut, rest: bool
) -> None:
    with anyio.fail_after(10):
        refused = await ask(sut, "SendMessage", {"message": message("x", taskId="nope")}, rest)
    assert refused.code == -32001


# -- the data model and its serialization (§4, §5) -------------------------------------------------


@_BINDINGS
async def test_DM_TASK_001_002_DM_MSG_002_DM_STATUS_001_DM_SERIAL_001_to_004_the_shapes(
    sut: Sut, rest: bool
) -> None:
    """DM-TASK-001, DM-TASK-002, DM-MSG-002, DM-STATUS-001, DM-SERIAL-001, DM-SERIAL-002,
    DM-SERIAL-003, DM-SERIAL-004: required fields present, enums as ProtoJSON names,
    camelCase keys, UTC timestamps."""
    with anyio.fail_after(10):
        done = await finished_task(sut, rest)
        asked = await waiting_task(sut, rest)
        said = (await send(sut, "tck-message-response", rest)).result["message"]
    for task in (done, asked):
        assert task["id"] and task["contextId"] and task["status"]["state"] in _STATES
        assert _ISO_UTC.match(task["status"]["timestamp"]), task["status"]["timestamp"]
        for each in task["history"] + [said]:
            assert each["role"] in ("ROLE_USER", "ROLE_AGENT") and each["messageId"]
            assert each["parts"]  # a required array holds at least one element
    keys = [k for k, _ in walk([done, asked, said]) if k not in ("data", "metadata")]
    assert not [k for k in keys if "_" in k], keys


# -- streams (§3.5) --------------------------------------------------------------------------------


@_BINDINGS
async def test_STREAM_ORDER_001_events_come_in_the_order_they_happened(
    sut: Sut, rest: bool
) -> None:
    with anyio.fail_after(10):
        stream = await ask(sut, "SendStreamingMessage", {"message": message("tck-stream")}, rest)
        events = await events_of(stream, rest)
        got = (await ask(sut, "GetTask", {"id": events[0]["task"]["id"]}, rest)).result
    states = [e["statusUpdate"]["status"]["state"] for e in events if "statusUpdate" in e]
    assert states[-1] == "TASK_STATE_COMPLETED" == got["status"]["state"]
    assert states.index("TASK_STATE_COMPLETED") == len(states) - 1
    times = [e["statusUpdate"]["status"]["timestamp"] for e in events if "statusUpdate" in e]
    assert times == sorted(times)


@_BINDINGS
async def test_STREAM_ORDER_003_and_004_every_subscriber_sees_the_same_events_one_leaving(
    sut: Sut, rest: bool
) -> None:
    """STREAM-ORDER-003, STREAM-ORDER-004."""
    with anyio.fail_after(10):
        task = await waiting_task(sut, rest)
        streams = [await ask(sut, "SubscribeToTask", {"id": task["id"]}, rest) for _ in range(3)]
        seen: dict[int, list[Any]] = {}
        opened = [anyio.Event() for _ in streams]
        async with anyio.create_task_group() as tg:

            async def read(i: int, until: Callable[[Any], bool] | None) -> None:
                seen[i] = await events_of(streams[i], rest, until, opened[i])

            tg.start_soon(read, 0, lambda _: True)  # leaves after the first event
            tg.start_soon(read, 1, None)
            tg.start_soon(read, 2, None)
            for each in opened:
                await each.wait()
            done = message("tck-complete-task", "Complete", taskId=task["id"])
            await ask(sut, "SendMessage", {"message": done}, rest)
    assert len(seen[0]) == 1 and seen[1] == seen[2]
    assert seen[1][-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@_BINDINGS
async def test_STREAM_SUB_002_a_subscription_ends_when_the_task_does(sut: Sut, rest: bool) -> None:
    with anyio.fail_after(10):
        task = await waiting_task(sut, rest)
        stream = await ask(sut, "SubscribeToTask", {"id": task["id"]}, rest)
        events: list[Any] = []
        opened = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def subscribe() -> None:
                events.extend(await events_of(stream, rest, opened=opened))

            tg.start_soon(subscribe)
            await opened.wait()
            await ask(sut, "CancelTask", {"id": task["id"]}, rest)  # ends it, CANCELED
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"


@_BINDINGS
async def test_STREAM_SUB_003_a_finished_task_cannot_be_subscribed_to(sut: Sut, rest: bool) -> None:
    with anyio.fail_after(10):
        task = await finished_task(sut, rest)
        refused = await ask(sut, "SubscribeToTask", {"id": task["id"]}, rest)
    assert refused.code == -32004


# -- push notifications (§3.1.7 to §3.1.10, §4.3) --------------------------------------------------


@_BINDINGS
async def test_PUSH_CREATE_GET_LIST_DEL_a_config_is_kept_shown_listed_and_deleted_twice(
    sut: Sut, rest: bool
) -> None:
    """PUSH-CREATE-001, PUSH-CREATE-002, PUSH-GET-001, PUSH-GET-002, PUSH-LIST-001,
    PUSH-DEL-001 and PUSH-DEL-002."""
    with anyio.fail_after(10):
        task = await waiting_task(sut, rest)
        config = {"taskId": task["id"], "id": "c1", "url": sut.hook.url, "token": "t"}
        made = (await ask(sut, "CreateTaskPushNotificationConfig", config, rest)).result
        ids = {"taskId": task["id"], "id": "c1"}
        got = (await ask(sut, "GetTaskPushNotificationConfig", ids, rest)).result
        listed = await ask(sut, "ListTaskPushNotificationConfigs", {"taskId": task["id"]}, rest)
        gone = await ask(sut, "DeleteTaskPushNotificationConfig", ids, rest)
        again = await ask(sut, "DeleteTaskPushNotificationConfig", ids, rest)
        missing = await ask(sut, "GetTaskPushNotificationConfig", ids, rest)
        hidden = await ask(sut, "GetTaskPushNotificationConfig", ids, rest, caller=_OTHER)
        after = await ask(sut, "ListTaskPushNotificationConfigs", {"taskId": task["id"]}, rest)
    assert made["url"] == got["url"] == sut.hook.url and made["id"] == got["id"] == "c1"
    assert [c["id"] for c in listed.result["configs"]] == ["c1"]
    assert gone.code is None and again.code is None  # idempotent
    assert missing.code == hidden.code == -32001
    assert after.result.get("configs", []) == []


@_BINDINGS
async def test_PUSH_DELIVER_001_to_003_each_event_is_posted_with_the_configs_auth(
    sut: Sut, rest: bool
) -> None:
    """PUSH-DELIVER-001, PUSH-DELIVER-002, PUSH-DELIVER-003."""
    with anyio.fail_after(10):
        task = await waiting_task(sut, rest)
        config = {
            "taskId": task["id"],
            "url": sut.hook.url,
            "token": "tck-token",
            "authentication": {"scheme": "Bearer", "credentials": "tck-secret"},
        }
        await ask(sut, "CreateTaskPushNotificationConfig", config, rest)
        done = message("tck-complete-task", "Complete", taskId=task["id"])
        await ask(sut, "SendMessage", {"message": done}, rest)
        await sut.hook.completed.wait()
    for headers, body in sut.hook.deliveries:
        assert headers["authorization"] == "Bearer tck-secret"
        assert headers["x-a2a-notification-token"] == "tck-token"
        assert len(set(body) & {"task", "message", "statusUpdate", "artifactUpdate"}) == 1
        assert len(body) == 1


# -- the card (§8) ---------------------------------------------------------------------------------


async def test_CARD_DISC_001_CARD_PROTO_001_002_BIND_FIELD_001_the_card_names_every_binding(
    sut: Sut,
) -> None:
    """CARD-DISC-001, CARD-PROTO-001, CARD-PROTO-002, BIND-FIELD-001."""
    url = "http://127.0.0.1:8700/a2a/tck"
    with anyio.fail_after(10):
        answer = await sut.server.card(HttpRequest("GET", "/", (), b""), "tck", url)
    card = json.loads(answer.body)
    assert answer.status == 200 and card["name"] and card["skills"]
    offered = {
        (i["protocolBinding"], i["protocolVersion"], i["url"]) for i in card["supportedInterfaces"]
    }
    assert offered == {("JSONRPC", "1.0", url), ("JSONRPC", "0.3", url), ("HTTP+JSON", "1.0", url)}


# -- versions and the bindings' own rules (§3.6, §9, §11) ------------------------------------------


@_BINDINGS
async def test_VER_SERVER_002_a_version_not_spoken_is_version_not_supported(
    sut: Sut, rest: bool
) -> None:
    with anyio.fail_after(10):
        refused = await ask(sut, "GetTask", {"id": "x"}, rest, headers=(("a2a-version", "9.9"),))
    assert refused.code == -32009 and "9.9" in json.dumps(refused.body)


@_BINDINGS
async def test_VER_SERVER_003_and_JSONRPC_SVC_002_HTTP_JSON_SVC_002_an_empty_version_is_0_3(
    sut: Sut, rest: bool
) -> None:
    """VER-SERVER-003, JSONRPC-SVC-002, HTTP_JSON-SVC-002: the version is a header (a
    service parameter), and an empty one means 0.3."""
    with anyio.fail_after(10):
        task = await finished_task(sut, rest)
        old = await ask(sut, "GetTask", {"id": task["id"]}, rest, headers=(("a2a-version", ""),))
    assert old.result["status"]["state"] == "completed"  # 0.3's lower-case state


async def test_JSONRPC_FMT_001_002_SVC_001_ERR_001_to_003_SSE_001_002_json_rpc_envelope(
    sut: Sut,
) -> None:
    """JSONRPC-FMT-001, JSONRPC-FMT-002, JSONRPC-SVC-001, JSONRPC-ERR-001, JSONRPC-ERR-002,
    JSONRPC-ERR-003, JSONRPC-SSE-001, JSONRPC-SSE-002: PascalCase methods, JSON-RPC 2.0
    envelopes in application/json (and SSE for streams), errors as {code, message, data:
    [ErrorInfo]} with the A2A codes of -32001..-32099."""
    with anyio.fail_after(10):
        task = await finished_task(sut, False)
        ok = await ask(sut, "GetTask", {"id": task["id"]}, False)
        errors = [
            await ask(sut, "GetTask", {"id": "nope"}, False),
            await ask(sut, "CancelTask", {"id": task["id"]}, False),
            await ask(sut, "SubscribeToTask", {"id": task["id"]}, False),
            await ask(sut, "GetTask", {"id": "x"}, False, headers=(("a2a-version", "9"),)),
        ]
        stream = await ask(sut, "SendStreamingMessage", {"message": message("tck-s")}, False)
        events = await events_of(stream, False)
        lower = await sut.server.handle(
            HttpRequest("POST", "/", _V1, b'{"jsonrpc":"2.0","id":7,"method":"getTask"}'),
            "tck",
            _OWN,
        )
    assert ok.body["jsonrpc"] == "2.0" and ok.body["id"] == 1 and "result" in ok.body
    assert ok.response.content_type == "application/json"
    assert [e.code for e in errors] == [-32001, -32002, -32004, -32009]
    reasons = ["TASK_NOT_FOUND", "TASK_NOT_CANCELABLE", "UNSUPPORTED_OPERATION"]
    for error, reason in zip(errors, [*reasons, "VERSION_NOT_SUPPORTED"], strict=True):
        body = error.body["error"]
        assert set(body) == {"code", "message", "data"} and -32099 <= body["code"] <= -32001
        info = body["data"][0]
        assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
        assert info["reason"] == reason and info["domain"] == "a2a-protocol.org"
    assert stream.response.content_type == "text/event-stream" and events
    assert json.loads(lower.body)["error"]["code"] == -32601
