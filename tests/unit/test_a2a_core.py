"""The pure core of the A2A wing: versions and shapes, the message-to-call rule, the task
store's bounds and its numbered log, and push configs (no sockets)."""

from __future__ import annotations

import pytest

from mesh.a2a._content import result_artifacts
from mesh.a2a._mapping import (
    Conversations,
    PlanError,
    plan_call,
    unsupported_media,
    whole_numbers,
)
from mesh.a2a._push import PushRefused, push_config_in
from mesh.a2a._tasks import StoreFull, TaskStore
from mesh.a2a._wire import camel_keys, event_for, message_in, method_of, negotiate, task_for

ECHO = {
    "name": "echo",
    "inputSchema": {
        "type": "object",
        "properties": {"message": {"type": "string"}},
        "required": ["message"],
    },
}
ADD = {"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}}}}


def test_versions_and_method_names() -> None:
    assert negotiate(None) == negotiate("") == negotiate("0.3") == "0.3"
    assert negotiate("1.0") == negotiate("1.0.1") == "1.0"
    assert negotiate("2.0") is None and negotiate("0.2") is None
    assert method_of("message/send", "0.3") == "SendMessage"
    assert method_of("tasks/resubscribe", "0.3") == "SubscribeToTask"
    assert method_of("message/send", "1.0") is None  # 1.0 has only the new names
    assert method_of("SendMessage", "0.3") == "SendMessage"
    assert method_of("tasks/list", "0.3") is None


def test_a_0_3_message_comes_in_as_1_0_and_goes_out_as_0_3() -> None:
    message = message_in(
        {
            "kind": "message",
            "role": "user",
            "messageId": "m",
            "parts": [
                {"kind": "text", "text": "hi"},
                {"kind": "data", "data": {"value": [1, 2]}, "metadata": {"data_part_compat": True}},
                {"kind": "file", "file": {"uri": "https://x/y.png", "mimeType": "image/png"}},
            ],
        }
    )
    assert message["role"] == "ROLE_USER"
    assert message["parts"] == [
        {"text": "hi"},
        {"data": [1, 2]},
        {"url": "https://x/y.png", "mediaType": "image/png"},
    ]
    task = {
        "id": "t",
        "contextId": "c",
        "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
        "artifacts": [{"artifactId": "a", "parts": [{"data": 7}]}],
    }
    old = task_for(task, "0.3")
    assert old["kind"] == "task" and old["status"]["state"] == "input-required"
    assert old["artifacts"][0]["parts"] == [
        {"kind": "data", "data": {"value": 7}, "metadata": {"data_part_compat": True}}
    ]
    update = {
        "statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}
    }
    assert event_for(update, "0.3")["final"] is False
    assert event_for(update, "1.0") is update
    with pytest.raises(ValueError, match="parts"):
        message_in({"parts": []})


def test_which_tool_a_message_calls() -> None:
    named = {"parts": [{"data": {"tool": "add", "arguments": {"a": 1}}}]}
    assert plan_call("calc", named, [], chat=False).tool == "add"
    plain = {"parts": [{"data": {"a": 2}}]}
    assert plan_call("calc", plain, [ADD], chat=False).arguments == {"a": 2}
    text = {"parts": [{"text": "hello"}]}
    assert plan_call("e", text, [ECHO], chat=False).arguments == {"message": "hello"}
    assert plan_call("p", text, [], chat=True).text == "hello"
    with pytest.raises(PlanError, match='"tool"'):
        plan_call("e", text, [ECHO, ADD], chat=False)
    with pytest.raises(PlanError, match="must be an object"):
        plan_call("e", {"parts": [{"data": {"tool": "x", "arguments": [1]}}]}, [], chat=False)
    assert result_artifacts("x") == [("result", [{"text": "x"}])]
    assert result_artifacts({"a": 1}) == [("result", [{"data": {"a": 1}}])]


def test_text_goes_to_the_text_entry_with_the_data_objects_fields() -> None:
    text = {"parts": [{"text": "hello"}, {"data": {"a": 2.0}}]}
    plan = plan_call("calc", text, [ECHO, ADD], chat=True, text_entry="echo")
    assert plan.tool == "echo" and plan.arguments == {"message": "hello", "a": 2.0}
    with pytest.raises(PlanError, match="text_entry, which is none of its tools"):
        plan_call("calc", text, [ECHO, ADD], chat=False, text_entry="nope")
    with pytest.raises(PlanError, match="takes no single string argument"):
        plan_call("calc", text, [ECHO, ADD], chat=False, text_entry="add")


def test_integral_floats_are_integers_where_the_schema_says_integer() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "many": {"type": "array", "items": {"type": "integer"}},
            "x": {"type": "number"},
        },
    }
    got = whole_numbers({"n": 4.0, "maybe": 2.0, "many": [1.0, 2.5], "x": 3.0, "y": 1.0}, schema)
    assert got == {"n": 4, "maybe": 2, "many": [1, 2.5], "x": 3.0, "y": 1.0}
    assert [type(v) for v in (got["n"], got["maybe"], got["x"])] == [int, int, float]
    plan = plan_call("calc", {"parts": [{"data": {"a": 7.0}}]}, [ADD], chat=False)
    assert type(plan.arguments["a"]) is int


def test_params_under_proto_names_and_media_types() -> None:
    sent = {"context_id": "c", "contextId": "kept", "page_size": 2, "metadata": {"a_b": 1}}
    sent["message"] = {"message_id": "m", "parts": [{"data": {"x_y": 1}, "media_type": "t"}]}
    assert camel_keys(sent) == {
        "contextId": "kept",
        "pageSize": 2,
        "metadata": {"a_b": 1},
        "message": {"messageId": "m", "parts": [{"data": {"x_y": 1}, "mediaType": "t"}]},
    }
    modes = ("text/plain", "application/json")
    assert unsupported_media([{"text": "a", "mediaType": "TEXT/plain; q=1"}], modes) is None
    assert unsupported_media([{"raw": "", "mediaType": "image/png"}], modes) == "image/png"
    assert unsupported_media([{"url": "http://x/y"}], modes) is None


def test_a_conversation_counts_turns_and_remembers_replies() -> None:
    talks = Conversations()
    first = talks.turn("me", "alice", "c1", "hi")
    talks.replied("me", "alice", "c1", "hello")
    second = talks.turn("me", "alice", "c1", "how are you")
    assert (first["turn"], second["turn"]) == (1, 2) and second["room_id"] == "a2a-c1"
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert talks.turn("you", "alice", "c1", "hi")["turn"] == 1  # another client's is its own


def test_the_store_is_bounded_per_owner_and_never_evicts_running_work() -> None:
    store = TaskStore(max_tasks=3, max_per_owner=2)
    a1, a2 = store.create("echo", "a", None), store.create("echo", "a", None)
    with pytest.raises(StoreFull):
        store.create("echo", "a", None)  # both of a's are running
    a1.set_state("TASK_STATE_COMPLETED")
    a3 = store.create("echo", "a", None)  # a's oldest finished one goes
    assert store.get(a1.id, "a", "echo") is None and store.get(a3.id, "a", "echo") is a3
    b1 = store.create("echo", "b", None)
    with pytest.raises(StoreFull):
        store.create("echo", "b", None)  # full, and nothing has finished
    assert store.get(b1.id, "a", "echo") is None  # another owner's task is no task
    assert store.get(a2.id, "a", "other") is None  # nor is another agent's
    assert [t.id for t in store.listing("a", "echo")] == [a3.id, a2.id]


def test_a_task_numbers_its_events_and_a_finished_task_stays_finished() -> None:
    task = TaskStore().create("echo", "a", "ctx")
    task.set_state("TASK_STATE_WORKING")
    task.add_artifact({"artifactId": "r", "parts": [{"text": "a"}]}, append=False, last=False)
    task.add_artifact({"artifactId": "r", "parts": [{"text": "b"}]}, append=True, last=True)
    task.set_state("TASK_STATE_CANCELED")
    task.set_state("TASK_STATE_COMPLETED")  # too late: it was cancelled
    assert [n for n, _ in task.events] == [1, 2, 3, 4] and task.state == "TASK_STATE_CANCELED"
    assert [n for n, _ in task.events_after(2)] == [3, 4]
    assert task.snapshot()["artifacts"] == [
        {"artifactId": "r", "parts": [{"text": "a"}, {"text": "b"}]}
    ]


def test_push_configs_pass_the_url_check_and_keep_credentials_to_themselves() -> None:
    def check(url: str) -> str | None:
        return None if url.startswith("http://127.0.0.1") else "endpoint host is not allowed"

    config = push_config_in(
        {
            "url": "http://127.0.0.1:9/h",
            "token": "t",
            "authentication": {"scheme": "Bearer", "credentials": "c"},
        },
        "task",
        check,
    )
    assert config.headers()["authorization"] == "Bearer c"
    assert "credentials" not in str(config.shown())
    old = push_config_in(
        {
            "taskId": "task",
            "pushNotificationConfig": {
                "url": "http://127.0.0.1:9/h",
                "authentication": {"schemes": ["Basic"], "credentials": "x"},
            },
        },
        "task",
        check,
    )
    assert old.scheme == "Basic"
    with pytest.raises(PushRefused, match="push url refused: url host is not allowed"):
        push_config_in({"url": "http://10.0.0.1/h"}, "task", check)
