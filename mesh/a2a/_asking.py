"""A task that asks its client: an agent's elicitation as A2A's ``INPUT_REQUIRED``.

While a task's call runs, the agent may ask its caller for input
(``ctx.elicit``, :mod:`mesh._rpc.asks`). Over A2A the caller is a client that
sent a message and is gone until it sends the next one, so the question becomes
the task's state: ``TASK_STATE_INPUT_REQUIRED``, whose status message holds the
question's text and the schema it asks to be filled (a data part of media type
``application/schema+json``, for a client that fills forms). The client's next
message with that ``taskId`` answers it (:func:`answer_of`):

- a data part: ``accept`` with that object, checked against the schema first
  (an answer that does not fit is refused, and the task keeps waiting);
- text only: ``accept`` with the text as the schema's one string field (a
  question of several fields, or none a string, needs a data part);
- ``CancelTask``: ``cancel`` (the task then ends ``CANCELED``).

The answer's ``_meta.a2a`` holds the answering message's context (its id, its
metadata, its files: what a tool's ``a2a`` argument holds), for an agent that
reads it with ``ctx.ask``. A task asks one question at a time, as A2A has one
``INPUT_REQUIRED``; the call's deadline bounds the wait as it bounds the call.
Sampling is refused: A2A has no way to ask a client's model. Log lines are
dropped: a status message is what a client shows a person, and one per log line
would crowd out the task's events a re-subscriber is kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mesh._errors import ErrorCode, InvalidParams, MeshError, MethodNotFound
from mesh._rpc.asks import AskHandlers, check_content, check_elicit_schema
from mesh.a2a._content import request_context
from mesh.a2a._mapping import whole_numbers
from mesh.a2a._tasks import Question, Task, new_id

__all__ = ["SCHEMA_MEDIA", "AnswerError", "answer_of", "check_fits", "task_asks"]

#: The media type of the data part that holds a question's schema.
SCHEMA_MEDIA: Final = "application/schema+json"


#: Each JSON Schema type an elicitation may ask for, and the Python values that fit it.
class AnswerError(Exception):
    """A follow-up message that does not answer the task's question (the text says why)."""


def task_asks(task: Task) -> AskHandlers:
    """The ask handlers of ``task``'s call: an elicitation waits in ``INPUT_REQUIRED``;
    sampling is refused; logs are dropped (the module says why)."""

    async def on_elicit(params: dict[str, Any]) -> Any:
        return await _ask(task, params)

    async def on_sample(params: dict[str, Any]) -> Any:
        raise MethodNotFound(
            "this call came over A2A, which has no way to ask a client's model:"
            " sampling is not offered to an A2A client"
        )

    return {"on_elicit": on_elicit, "on_sample": on_sample}


async def _ask(task: Task, params: dict[str, Any]) -> dict[str, Any]:
    if task.question is not None:
        raise MeshError(
            f"task {task.id!r} is waiting for an answer already: an A2A task asks one"
            " question at a time (INPUT_REQUIRED)",
            code=ErrorCode.UNAVAILABLE,
        )
    schema = params.get("requestedSchema")
    check_elicit_schema(schema)
    assert isinstance(schema, Mapping)
    question = Question(dict(schema))
    parts: list[dict[str, Any]] = [{"text": str(params.get("message") or "")}]
    parts.append({"data": question.schema, "mediaType": SCHEMA_MEDIA})
    said = {
        "messageId": new_id(),
        "role": "ROLE_AGENT",
        "parts": parts,
        "contextId": task.context_id,
        "taskId": task.id,
    }
    task.question = question
    task.set_state("TASK_STATE_INPUT_REQUIRED", said)
    try:
        return await question.wait()
    finally:
        if task.question is question:
            task.question = None


def answer_of(
    message: dict[str, Any], metadata: dict[str, Any], schema: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``ElicitResult`` a follow-up ``message`` gives to a question of ``schema``,
    or :class:`AnswerError` saying why it gives none."""
    parts = [p for p in message.get("parts") or () if isinstance(p, dict)]
    data = [p["data"] for p in parts if "data" in p]
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
    if data:
        content = whole_numbers(data[0], schema)
        if not isinstance(content, dict):
            raise AnswerError("the answer's data part must be an object of the question's fields")
    elif texts:
        content = {_sole_string(schema): "\n".join(texts)}
    else:
        raise AnswerError("an answer holds a data part (the question's fields) or text")
    check_fits(content, schema)
    return {
        "action": "accept",
        "content": content,
        "_meta": {"a2a": request_context(message, metadata)},
    }


def _sole_string(schema: Mapping[str, Any]) -> str:
    properties = dict(schema.get("properties") or {})
    strings = [
        k for k, v in properties.items() if isinstance(v, dict) and v.get("type") == "string"
    ]
    required = [r for r in schema.get("required") or () if r not in strings]
    if len(strings) == 1 and not required:
        return str(strings[0])
    raise AnswerError(
        f"this question asks for {_names(properties)}: text answers a question of one"
        " string field (and no other required one), so answer with a data part holding"
        " the fields"
    )


def check_fits(content: dict[str, Any], schema: Mapping[str, Any]) -> None:
    """Raise :class:`AnswerError` unless ``content`` is what ``schema`` asks for: only
    its fields, its required ones all there, each of its type (and enum)."""
    try:
        check_content(content, schema)
    except InvalidParams as exc:
        raise AnswerError(str(exc)) from None


def _names(properties: Mapping[str, Any]) -> str:
    return ", ".join(repr(k) for k in properties) or "no fields"
