"""The pure parts of A2A's HTTP+JSON binding (routes, query params, AIP-193 errors), of tasks
kept on disk (read back, bounded, retention), and of results as artifacts (files, several
artifacts, a rejection)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest

from mesh import ToolError
from mesh.a2a._content import rejected, result_artifacts
from mesh.a2a._journal import TaskJournal
from mesh.a2a._jsonrpc import A2aError
from mesh.a2a._rest import query_params, rest_error, route
from mesh.a2a._tasks import STOPPED, TaskStore
from mesh.content import EmbeddedResource, Image, ResourceLink, Text, ToolResult
from mesh.daemon._settings import SettingsError, load_settings

pytestmark = pytest.mark.anyio


def test_each_rest_url_names_its_method_and_the_ids_in_its_path() -> None:
    """HTTP_JSON-URL-001, HTTP_JSON-URL-002."""
    push = "pushNotificationConfigs"
    assert route("POST", ["message:send"]) == ("SendMessage", {})
    assert route("POST", ["message:stream"]) == ("SendStreamingMessage", {})
    assert route("GET", ["tasks"]) == ("ListTasks", {})
    assert route("GET", ["tasks", "t:1"]) == ("GetTask", {"id": "t:1"})
    assert route("POST", ["tasks", "t:1:cancel"]) == ("CancelTask", {"id": "t:1"})
    assert route("POST", ["tasks", "t1:subscribe"]) == ("SubscribeToTask", {"id": "t1"})
    assert route("POST", ["tasks", "t1", push]) == (
        "CreateTaskPushNotificationConfig",
        {"taskId": "t1"},
    )
    assert route("GET", ["tasks", "t1", push]) == (
        "ListTaskPushNotificationConfigs",
        {"taskId": "t1"},
    )
    assert route("DELETE", ["tasks", "t1", push, "c"]) == (
        "DeleteTaskPushNotificationConfig",
        {"taskId": "t1", "id": "c"},
    )
    assert route("GET", ["extendedAgentCard"]) == ("GetExtendedAgentCard", {})
    for verb, path in (
        ("DELETE", ["tasks", "t1"]),
        ("POST", ["tasks", "t1:frob"]),
        ("POST", ["tasks", ":cancel"]),
        ("GET", ["message:send"]),
    ):
        with pytest.raises(A2aError) as refused:
            route(verb, path)
        assert refused.value.code == -32601


def test_query_params_are_camel_case_numbers_and_flags() -> None:
    """HTTP_JSON-QP-001: decimal strings and lower-case booleans, snake_case read too."""
    query = {
        "history_length": ["3"],
        "pageSize": ["x"],
        "includeArtifacts": ["true"],
        "contextId": ["c"],
    }
    assert query_params(query) == {
        "historyLength": 3,
        "pageSize": "x",  # left for the method to refuse by name
        "includeArtifacts": True,
        "contextId": "c",
    }


def test_errors_map_to_the_spec_http_statuses_with_error_info() -> None:
    """HTTP_JSON-ERR-001, HTTP_JSON-ERR-002, HTTP_JSON-STATUS-001."""
    for code, status, name, reason in (
        (-32001, 404, "NOT_FOUND", "TASK_NOT_FOUND"),
        (-32002, 409, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"),
        (-32003, 400, "UNIMPLEMENTED", "PUSH_NOTIFICATION_NOT_SUPPORTED"),
        (-32004, 400, "UNIMPLEMENTED", "UNSUPPORTED_OPERATION"),
        (-32005, 415, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED"),
        (-32006, 502, "INTERNAL", "INVALID_AGENT_RESPONSE"),
        (-32007, 400, "FAILED_PRECONDITION", "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        (-32009, 400, "UNIMPLEMENTED", "VERSION_NOT_SUPPORTED"),
        (-32602, 400, "INVALID_ARGUMENT", "INVALID_PARAMS"),
    ):
        answer = rest_error(code, "why")
        error = json.loads(answer.body)["error"]
        assert answer.status == status and answer.content_type == "application/json"
        assert (error["code"], error["status"], error["message"]) == (status, name, "why")
        assert error["details"][0]["reason"] == reason
        assert error["details"][0]["domain"] == "a2a-protocol.org"


def test_content_items_become_file_parts_and_artifacts_of_their_own() -> None:
    png = b"\x89PNG"
    answer = ToolResult(
        [
            Text("a chart"),
            Image(png, "image/png"),
            ResourceLink(uri="https://x.test/r.pdf", name="report", mime_type="application/pdf"),
            EmbeddedResource.of("file:///tmp/notes.txt", mime_type="text/plain", text="hi"),
        ],
        structured={"n": 1},
    )
    wire = json.loads(json.dumps(_wire(answer)))
    assert result_artifacts(wire) == [
        (
            "result",
            [
                {"text": "a chart"},
                {"raw": base64.b64encode(png).decode(), "mediaType": "image/png"},
                {"data": {"n": 1}},
            ],
        ),
        (
            "report",
            [{"url": "https://x.test/r.pdf", "filename": "report", "mediaType": "application/pdf"}],
        ),
        (
            "file:///tmp/notes.txt",
            [{"text": "hi", "filename": "notes.txt", "mediaType": "text/plain"}],
        ),
    ]


def _wire(answer: ToolResult[dict[str, int]]) -> object:
    import msgspec

    return msgspec.json.decode(msgspec.json.encode(answer))


def test_a_tool_error_typed_rejected_rejects() -> None:
    assert rejected(ToolError("no", data={"type": "Rejected"}))
    assert not rejected(ToolError("boom"))


async def test_tasks_come_back_from_disk_and_one_still_running_ends_failed(
    tmp_path: Path,
) -> None:
    first = TaskStore(directory=tmp_path, max_history=4)
    async with anyio.create_task_group() as tg:
        await first.load()
        await tg.start(first.keep)
        done = first.create("echo", "me", "ctx")
        done.remember({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]})
        done.add_artifact({"artifactId": "a", "parts": [{"text": "y"}]}, append=False, last=True)
        done.set_state("TASK_STATE_COMPLETED")
        running = first.create("echo", "me", None)
        running.set_state("TASK_STATE_WORKING")
        tg.cancel_scope.cancel()  # the daemon stops: the last changes are written even so
    second = TaskStore(directory=tmp_path, max_history=4)
    assert await second.load() == 2
    back = second.get(done.id, "me", "echo")
    assert back is not None and back.snapshot() == done.snapshot()
    stopped = second.get(running.id, "me", "echo")
    assert stopped is not None and stopped.state == "TASK_STATE_FAILED"
    assert stopped.status_message is not None
    assert stopped.status_message["parts"] == [{"text": STOPPED}]
    assert second.create("echo", "me", None).number == 3  # numbers go on, ListTasks pages


async def test_a_task_that_runs_its_course_at_once_is_written_once_as_it_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's writer lets changes gather (``WRITE_AFTER``): a task that starts, works
    and completes between two writes costs one row, in its last state, not one per change."""
    written: list[tuple[str, str]] = []
    wrote = anyio.Event()
    real_write = TaskJournal.write

    def write(journal: TaskJournal, records: Any, gone: Any = ()) -> None:
        records = list(records)
        written.extend((r["id"], r["state"]) for r in records)
        real_write(journal, records, gone)
        anyio.from_thread.run_sync(wrote.set)  # the journal writes in a worker thread

    monkeypatch.setattr(TaskJournal, "write", write)
    store = TaskStore(directory=tmp_path)
    async with anyio.create_task_group() as tg:
        await tg.start(store.keep)
        task = store.create("echo", "me", None)
        for change in ("TASK_STATE_WORKING", None, "TASK_STATE_COMPLETED"):
            await anyio.lowlevel.checkpoint()  # the writer may run between changes
            if change is None:
                task.add_artifact({"artifactId": "a", "parts": []}, append=False, last=True)
            else:
                task.set_state(change)
        with anyio.fail_after(5):
            await wrote.wait()
        tg.cancel_scope.cancel()
    assert written == [(task.id, "TASK_STATE_COMPLETED")]


async def test_bounds_and_retention_apply_to_tasks_read_back(tmp_path: Path) -> None:
    first = TaskStore(directory=tmp_path)
    async with anyio.create_task_group() as tg:
        await tg.start(first.keep)
        tasks = [first.create("echo", "me", None) for _ in range(3)]
        for task in tasks:
            task.set_state("TASK_STATE_COMPLETED")
        tg.cancel_scope.cancel()
    fewer = TaskStore(directory=tmp_path, max_per_owner=2)
    assert await fewer.load() == 2
    assert fewer.get(tasks[0].id, "me", "echo") is None  # the oldest went
    aged = TaskStore(directory=tmp_path, retention=60.0)
    await aged.load()
    assert aged.sweep(now=tasks[-1].changed_at + 61) == 3


def test_a2a_task_bounds_are_checked_settings(tmp_path: Path) -> None:
    path = tmp_path / "mesh.toml"
    path.write_text("a2a_max_tasks = 10\na2a_max_tasks_per_identity = 11\n")
    with pytest.raises(SettingsError, match="a2a_max_tasks_per_identity"):
        load_settings(path)
    path.write_text("a2a_task_history = 0\n")
    with pytest.raises(SettingsError, match="a2a_task_history"):
        load_settings(path)
    path.write_text(
        "a2a_task_retention = 3600\na2a_max_tasks = 50\na2a_max_tasks_per_identity = 5\n"
    )
    chosen = load_settings(path)
    assert (chosen.a2a_task_retention, chosen.a2a_max_tasks) == (3600.0, 50)
