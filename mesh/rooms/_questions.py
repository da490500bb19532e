"""A member's question to the room's people: the one open at a time, and the answer to it.

An agent taking its turn may ask its caller for input (``ctx.elicit``; a mounted
A2A agent's ``INPUT_REQUIRED`` and a mounted MCP server's elicitation arrive the
same way). In a room the caller is the room, and the room's people answer: the
engine records a ``QUESTION``, any person present answers it through the people's
routes (accept with fields that fit the question's schema, decline or cancel),
and the answer goes back to the agent as its elicitation's result.

:class:`Questions` is the pure part: which question is open, who may answer it,
whether an answer fits. One question is open per room at a time, which is one per
turn (a room takes one turn at a time); a second ask while one is open is refused
at once, as is an ask in a room with nobody present to answer it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final, Literal

import anyio

from mesh._errors import ErrorCode, InvalidParams, MeshError, MethodNotFound
from mesh._rpc.asks import check_content, check_elicit_schema, with_defaults
from mesh.rooms._errors import InvalidRoomSpec, RoomConflict

__all__ = ["ANSWERS", "Answer", "OpenQuestion", "Questions"]

#: What a person may answer a question with (``withdrawn`` is the room's alone).
ANSWERS: Final = ("accept", "decline", "cancel")

#: How many ended questions a room remembers, to say why a late answer is refused.
_REMEMBERED: Final = 16

Action = Literal["accept", "decline", "cancel", "withdrawn"]


class Answer:
    """How a question ended: ``action``, the accepted ``content``, and who (None: the room)."""

    def __init__(
        self,
        action: Action,
        content: dict[str, Any] | None = None,
        by: str | None = None,
        reason: str = "",
    ) -> None:
        self.action, self.content, self.by, self.reason = action, content, by, reason

    def result(self) -> dict[str, Any]:
        """MCP's ``ElicitResult`` for the agent (a withdrawn question is a cancel)."""
        if self.action == "accept":
            return {"action": "accept", "content": self.content or {}}
        return {"action": "cancel" if self.action == "withdrawn" else self.action}


class OpenQuestion:
    """A question asked at ``turn`` by ``asker``, waiting for its :class:`Answer`."""

    def __init__(self, qid: str, turn: int, asker: str, schema: Mapping[str, Any]) -> None:
        self.id, self.turn, self.asker, self.schema = qid, turn, asker, schema
        self.answer: Answer | None = None
        self.answered = anyio.Event()
        #: Whether its ``ANSWER`` is recorded (or being): it is, once.
        self.recorded = False

    def close(self, answer: Answer) -> bool:
        """End it with ``answer``; False if it had ended already (the first one wins)."""
        if self.answer is not None:
            return False
        self.answer = answer
        self.answered.set()
        return True


class Questions:
    """The question open in one room, if any, and the count that names the next one."""

    def __init__(self) -> None:
        self.open: OpenQuestion | None = None
        self._asked = 0
        self._ended: OrderedDict[str, Answer] = OrderedDict()

    def ask(
        self, room_id: str, turn: int, asker: str, params: Mapping[str, Any], present: bool
    ) -> tuple[OpenQuestion, str]:
        """Open a question from an elicitation's params, and its message; refused at once
        (a :class:`~mesh.MeshError` the agent gets) with nobody to answer, or one open."""
        if not present:
            raise MethodNotFound(
                f"room {room_id!r} has no person present to answer a question (a room's"
                " people answer its members' elicitations: join the room first)"
            )
        if self.open is not None and self.open.answer is None:
            raise MeshError(
                f"room {room_id!r} has question {self.open.id!r} open already: one open"
                " question per room at a time (answer it, then ask again)",
                code=ErrorCode.UNAVAILABLE,
                data={"limit": "one open question per room"},
            )
        message, schema = params.get("message"), params.get("requestedSchema")
        if not isinstance(message, str) or not message:
            raise InvalidParams("an elicitation needs a message for the person who answers")
        check_elicit_schema(schema)
        assert isinstance(schema, Mapping)  # checked just above
        self._asked += 1
        self.open = OpenQuestion(f"q{turn}-{self._asked}", turn, asker, schema)
        return self.open, message

    def take(self, question: OpenQuestion) -> None:
        """Forget ``question`` once it has ended (answered or withdrawn)."""
        if self.open is question:
            self.open = None
        if question.answer is not None:
            self.remember(question.id, question.answer)

    def remember(self, qid: str, answer: Answer) -> None:
        """How question ``qid`` ended, kept so that a late answer is told (the last few)."""
        self._ended[qid] = answer
        while len(self._ended) > _REMEMBERED:
            self._ended.popitem(last=False)

    def closed(self, room_id: str, qid: str) -> RoomConflict | None:
        """Why an answer to ``qid`` is refused if it has ended; None if it has not."""
        question = self.open
        if question is not None and question.id == qid and question.answer is not None:
            ended: Answer | None = question.answer
        else:
            ended = self._ended.get(qid)
        if ended is None:
            return None
        how = (
            f"answered already ({ended.action} by {ended.by!r})"
            if ended.by is not None
            else f"withdrawn ({ended.reason or 'nobody answered it'})"
        )
        return RoomConflict(f"room {room_id!r} question {qid!r} was {how}", room=room_id)

    def answer(
        self,
        room_id: str,
        qid: str,
        member_id: str,
        action: str,
        content: Mapping[str, Any] | None,
    ) -> OpenQuestion:
        """Close question ``qid`` with a person's answer (its fields checked against the
        question's schema, and its defaults filled in); the question, or why not."""
        refused = self.closed(room_id, qid)
        if refused is not None:
            raise refused
        question = self.open
        if question is None or question.id != qid or question.answer is not None:
            raise RoomConflict(
                f"room {room_id!r} has no open question {qid!r}: it was answered already,"
                " withdrawn, or never asked",
                room=room_id,
            )
        question.close(Answer(_action(action), _content(action, content, question), member_id))
        return question


def _action(action: str) -> Action:
    if action == "accept":
        return "accept"
    if action == "decline":
        return "decline"
    if action == "cancel":
        return "cancel"
    raise InvalidRoomSpec(f"an answer's action is one of {', '.join(ANSWERS)}, not {action!r}")


def _content(
    action: str, content: Mapping[str, Any] | None, question: OpenQuestion
) -> dict[str, Any] | None:
    if action != "accept":
        if content:
            raise InvalidRoomSpec(f"a {action} carries no content: only accept does")
        return None
    try:
        check_content(content or {}, question.schema)
    except InvalidParams as exc:
        raise InvalidRoomSpec(f"the answer does not fit question {question.id!r}: {exc}") from None
    return with_defaults(dict(question.schema), content or {})
