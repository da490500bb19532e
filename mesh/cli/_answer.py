"""``mesh room answer``, and the join prompt's ``/answer``: a person answers a member's question.

A member that asks the room's people something mid-turn records a ``QUESTION``
(its id, its message, the fields it asks for). A person present answers it with
``FIELD=VALUE`` words, each value read as the question's schema types that field
(``42`` is a number only where the question asks for one), or declines or cancels
it. The daemon checks the answer again against the question; this module only
turns words into the body of ``POST /rooms/{id}/answer``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

import msgspec

from mesh._text import printable
from mesh.rooms import QuestionEvent, decode_event
from mesh.rooms._people import person_id

__all__ = ["ANSWER_HELP", "answer_body", "cmd_room_answer", "question_hint"]

Request = Callable[..., Any]

#: How the join prompt takes an answer.
ANSWER_HELP: Final = "/answer QUESTION FIELD=VALUE ..., /decline QUESTION or /cancel QUESTION"
_TRUE: Final = frozenset({"true", "yes", "y", "1", "on"})
_FALSE: Final = frozenset({"false", "no", "n", "0", "off"})


class AnswerWordsError(ValueError):
    """Words that make no answer (the text says why)."""


def answer_body(
    member: str, question: str, action: str, words: Sequence[str], schema: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``POST /rooms/{id}/answer`` body for ``words`` (``FIELD=VALUE`` each)."""
    body: dict[str, Any] = {"member": member, "question": question, "action": action}
    if action != "accept":
        if words:
            raise AnswerWordsError(f"a {action} carries no fields")
        return body
    properties = schema.get("properties") or {}
    content: dict[str, Any] = {}
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not name:
            raise AnswerWordsError(f"{word!r} is not FIELD=VALUE")
        content[name] = _typed(name, value, properties.get(name) or {})
    body["content"] = content
    return body


def _typed(name: str, value: str, prop: Mapping[str, Any]) -> Any:
    kind = prop.get("type")
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
    except ValueError:
        raise AnswerWordsError(f"field {name!r} must be {kind}, not {value!r}") from None
    if kind == "boolean":
        if value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise AnswerWordsError(f"field {name!r} is yes or no, not {value!r}")
    if kind == "array":
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def question_hint(event: QuestionEvent) -> str:
    """What the join prompt says under a question: how to answer it."""
    return f"-- question {printable(event.question)}: answer with {ANSWER_HELP} --"


def cmd_room_answer(args: argparse.Namespace, request: Request) -> int:
    path = f"/rooms/{quote(args.room, safe='')}"
    schema = _schema_of(request(args, "GET", f"{path}/events")["events"], args.question)
    action = "decline" if args.decline else "cancel" if args.cancel else "accept"
    member = person_id(args.as_name)
    try:
        body = answer_body(member, args.question, action, args.fields, schema)
    except AnswerWordsError as exc:
        raise SystemExit(f"mesh: {exc}") from None
    answered = request(args, "POST", f"{path}/answer", body)
    print(f"answered question {printable(answered['question'])} ({action})")
    return 0


def _schema_of(events: Sequence[Any], question: str) -> Mapping[str, Any]:
    """The schema question ``question`` asked (empty if the room holds no such question:
    the daemon then refuses the answer, saying so)."""
    for raw in events:
        if isinstance(raw, dict) and raw.get("type") == "QUESTION":
            event = decode_event(msgspec.json.encode(raw))
            if isinstance(event, QuestionEvent) and event.question == question:
                return event.schema
    return {}
