"""An agent that asks its caller mid-call, served over A2A to the a2a-sdk's client through a real
daemon on loopback, on both bindings: the task waits in INPUT_REQUIRED with the question, the
client's next message with its taskId answers it, and the task continues to its end; a
follow-up that answers nothing is refused with the spec's error and the task keeps waiting."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from google.protobuf import json_format, struct_pb2

from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.a2a._mesh import GUARD, Mesh, as_dict, open_mesh, sdk_client, tool_message

pytestmark = pytest.mark.anyio

_BINDINGS = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}


@pytest.fixture(scope="module")
async def mesh(anyio_backend: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mesh]:
    with pytest.MonkeyPatch.context() as env:
        async with open_mesh(tmp_path_factory.mktemp("asks"), env) as shared:
            yield shared


def follow_up(task_id: str, *parts: Part) -> SendMessageRequest:
    message = Message(message_id="m-answer", role=Role.ROLE_USER, task_id=task_id, parts=parts)
    return SendMessageRequest(message=message)


def data(value: dict[str, Any]) -> Part:
    return Part(data=json_format.ParseDict(value, struct_pb2.Value()))


async def last_task(client: Any, request: SendMessageRequest) -> Any:
    events = [e async for e in client.send_message(request)]
    return events[-1].task


@_BINDINGS
async def test_an_agent_that_asks_is_answered_and_completes_in_the_same_task(
    mesh: Mesh, binding: str
) -> None:
    async with sdk_client(mesh, "echo", streaming=False, binding=binding) as (client, _):
        with anyio.fail_after(GUARD):
            asked = await last_task(client, tool_message("ask", question="Your name?"))
            assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            question = as_dict(asked.status.message)["parts"]
            assert question == [
                {"text": "Your name?"},
                {"data": _SCHEMA, "mediaType": "application/schema+json"},
            ]
            got = await client.get_task(GetTaskRequest(id=asked.id))
            assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            done = await last_task(client, follow_up(asked.id, Part(text="Ada")))
            assert done.id == asked.id
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            result = as_dict(done.artifacts[0])["parts"]
            assert result == [{"data": {"action": "accept", "answer": "Ada"}}]
            # A structured client answers with the fields as a data part.
            again = await last_task(client, tool_message("ask", question="And yours?"))
            done = await last_task(client, follow_up(again.id, data({"answer": "Bo"})))
            result = as_dict(done.artifacts[0])["parts"]
            assert result == [{"data": {"action": "accept", "answer": "Bo"}}]


@_BINDINGS
async def test_a_streaming_client_sees_the_question_then_the_rest_of_the_task(
    mesh: Mesh, binding: str
) -> None:
    async with sdk_client(mesh, "echo", binding=binding) as (client, _):
        with anyio.fail_after(GUARD):
            first = [
                as_dict(e) async for e in client.send_message(tool_message("ask", question="?"))
            ]
            # The question is the stream's last event: a status update, or the task itself
            # when the agent asked before the stream began.
            asked = first[-1].get("statusUpdate") or first[-1]["task"]
            assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            task_id = asked.get("taskId") or asked["id"]
            answer = follow_up(task_id, Part(text="yes"))
            rest = [as_dict(e) async for e in client.send_message(answer)]
    # The stream starts with the task as it is (working, or done already if the agent was
    # quick), then its events to the end.
    assert rest[0]["task"]["id"] == task_id
    states = [e.get("statusUpdate", e.get("task", {})).get("status", {}).get("state") for e in rest]
    assert states[-1] == "TASK_STATE_COMPLETED"
    parts = [e["artifactUpdate"]["artifact"]["parts"] for e in rest if "artifactUpdate" in e]
    parts += [a["parts"] for e in rest for a in e.get("task", {}).get("artifacts", [])]
    assert parts == [[{"data": {"action": "accept", "answer": "yes"}}]]


@_BINDINGS
async def test_a_follow_up_that_answers_nothing_is_refused_and_the_task_keeps_waiting(
    mesh: Mesh, binding: str
) -> None:
    stranger = await mesh.token(f"stranger-{binding}")
    async with (
        sdk_client(mesh, "echo", streaming=False, binding=binding) as (client, _),
        sdk_client(mesh, "echo", streaming=False, binding=binding, token=stranger) as (other, _),
    ):
        with anyio.fail_after(GUARD):
            asked = await last_task(client, tool_message("ask", question="Your name?"))
            # Another token's follow-up: to it, there is no such task.
            with pytest.raises(TaskNotFoundError):
                await last_task(other, follow_up(asked.id, Part(text="Eve")))
            # An answer that does not fit the question's schema.
            with pytest.raises(InvalidParamsError, match="'answer' must be string"):
                await last_task(client, follow_up(asked.id, data({"answer": 4})))
            with pytest.raises(InvalidParamsError, match="no field 'name'"):
                await last_task(client, follow_up(asked.id, data({"name": "Ada"})))
            got = await client.get_task(GetTaskRequest(id=asked.id))
            assert got.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            done = await last_task(client, follow_up(asked.id, Part(text="Ada")))
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            # A follow-up to a finished task.
            with pytest.raises(UnsupportedOperationError, match="has finished"):
                await last_task(client, follow_up(asked.id, Part(text="again")))
    async with sdk_client(mesh, "held", streaming=False, binding=binding) as (client, _):
        request = tool_message("hold", seconds=600)
        request.configuration.return_immediately = True
        with anyio.fail_after(GUARD):
            working = await last_task(client, request)
            # An answer to a question nobody asked: the task is working, not waiting.
            with pytest.raises(UnsupportedOperationError, match="asked nothing"):
                await last_task(client, follow_up(working.id, Part(text="unasked")))
            await client.cancel_task(CancelTaskRequest(id=working.id))


@_BINDINGS
async def test_a_cancel_answers_the_question_and_an_unanswered_one_fails_at_the_deadline(
    mesh: Mesh, binding: str
) -> None:
    async with sdk_client(mesh, "echo", streaming=False, binding=binding) as (client, _):
        with anyio.fail_after(GUARD):
            asked = await last_task(client, tool_message("ask", question="Your name?"))
            cancelled = await client.cancel_task(CancelTaskRequest(id=asked.id))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            request = tool_message("ask", question="Quick?")
            request.metadata.update({"timeout": 2.0})
            waited = await last_task(client, request)
            assert waited.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            async with sdk_client(mesh, "echo", binding=binding) as (streaming, _):
                # A subscription goes on past the question, to the task's end; on a machine
                # slow enough that the deadline passed first, the finished task refuses one.
                subscribed = SubscribeToTaskRequest(id=waited.id)
                try:
                    events = [as_dict(e) async for e in streaming.subscribe(subscribed)]
                except UnsupportedOperationError:
                    events = [{"statusUpdate": {"status": {"state": "TASK_STATE_FAILED"}}}]
            assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_FAILED"
            waited = await client.get_task(GetTaskRequest(id=waited.id))
    assert waited.status.state == TaskState.TASK_STATE_FAILED
    assert "elicitation" in waited.status.message.parts[0].text


@_BINDINGS
async def test_sampling_is_refused_saying_a2a_has_none(mesh: Mesh, binding: str) -> None:
    async with sdk_client(mesh, "echo", streaming=False, binding=binding) as (client, _):
        with anyio.fail_after(GUARD):
            failed = await last_task(client, tool_message("think", prompt="hi"))
    assert failed.status.state == TaskState.TASK_STATE_FAILED
    assert "A2A" in failed.status.message.parts[0].text
    assert "sampling" in failed.status.message.parts[0].text
