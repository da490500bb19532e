"""The pure part of a member's question to the room's people: one open at a time, who may
answer it, and whether an answer fits its schema."""

from __future__ import annotations

import pytest

from mesh import InvalidParams, MeshError, MethodNotFound
from mesh.rooms import InvalidRoomSpec, RoomConflict
from mesh.rooms._questions import Answer, Questions

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {
        "colour": {"type": "string", "enum": ["red", "blue"]},
        "coats": {"type": "integer", "default": 2},
    },
    "required": ["colour"],
}
ASK = {"message": "Which colour?", "requestedSchema": SCHEMA}


async def test_an_ask_is_refused_at_once_with_nobody_present_or_one_open() -> None:
    questions = Questions()
    with pytest.raises(MethodNotFound, match="no person present"):
        questions.ask("r", 1, "painter", ASK, present=False)
    bad = {"message": "?", "requestedSchema": {"type": "object", "properties": {"x": {}}}}
    with pytest.raises(InvalidParams, match="no nested objects"):
        questions.ask("r", 1, "painter", bad, present=True)
    question, message = questions.ask("r", 1, "painter", ASK, present=True)
    assert (question.id, question.turn, message) == ("q1-1", 1, "Which colour?")
    with pytest.raises(MeshError, match="one open question per room"):
        questions.ask("r", 1, "painter", ASK, present=True)
    questions.take(question)
    assert questions.ask("r", 2, "painter", ASK, present=True)[0].id == "q2-2"


async def test_an_answer_must_fit_and_only_the_first_counts() -> None:
    questions = Questions()
    question, _ = questions.ask("r", 3, "painter", ASK, present=True)
    refusals = [
        ("q9-9", "decline", None, RoomConflict, "no open question 'q9-9'"),
        ("q3-1", "maybe", None, InvalidRoomSpec, "accept, decline, cancel"),
        ("q3-1", "decline", {"colour": "red"}, InvalidRoomSpec, "carries no content"),
        ("q3-1", "accept", {"colour": "green"}, InvalidRoomSpec, "'green' is none of"),
        ("q3-1", "accept", {"coats": 1}, InvalidRoomSpec, "needs the field 'colour'"),
        ("q3-1", "accept", {"colour": "red", "x": 1}, InvalidRoomSpec, "no field 'x'"),
        ("q3-1", "accept", {"colour": "red", "coats": True}, InvalidRoomSpec, "integer"),
    ]
    for qid, action, content, error, says in refusals:
        with pytest.raises(error, match=says):
            questions.answer("r", qid, "carol", action, content)
    assert not question.answered.is_set()  # still open through every refusal
    questions.answer("r", "q3-1", "carol", "accept", {"colour": "blue"})
    assert question.answer is not None and question.answered.is_set()
    assert question.answer.result() == {
        "action": "accept",
        "content": {"colour": "blue", "coats": 2},
    }
    with pytest.raises(RoomConflict, match="answered already"):
        questions.answer("r", "q3-1", "dave", "decline", None)
    assert not question.close(Answer("withdrawn", reason="late"))  # the first one wins


async def test_a_withdrawn_question_is_a_cancel_for_the_asker() -> None:
    assert Answer("withdrawn", reason="the turn ended").result() == {"action": "cancel"}
    assert Answer("decline", by="carol").result() == {"action": "decline"}


async def test_a_late_answer_is_told_how_the_question_ended_after_its_turn() -> None:
    questions = Questions()
    answered, _ = questions.ask("r", 1, "painter", ASK, present=True)
    questions.answer("r", "q1-1", "carol", "decline", None)
    questions.take(answered)  # the turn went on and the room let go of it
    withdrawn, _ = questions.ask("r", 2, "painter", ASK, present=True)
    withdrawn.close(Answer("withdrawn", reason="turn 2 ended before anyone answered"))
    questions.take(withdrawn)
    with pytest.raises(RoomConflict, match=r"'q1-1' was answered already \(decline by 'carol'\)"):
        questions.answer("r", "q1-1", "dave", "accept", {"colour": "red"})
    with pytest.raises(RoomConflict, match="'q2-2' was withdrawn \\(turn 2 ended before"):
        questions.answer("r", "q2-2", "carol", "cancel", None)
    refused = questions.closed("r", "q1-1")  # what a room no longer running says too
    assert refused is not None and "answered already" in str(refused)
    assert questions.closed("r", "q9-9") is None
    for turn in range(3, 40):  # a bounded memory: the oldest are forgotten
        asked, _ = questions.ask("r", turn, "painter", ASK, present=True)
        questions.answer("r", asked.id, "carol", "decline", None)
        questions.take(asked)
    assert questions.closed("r", "q1-1") is None
    with pytest.raises(RoomConflict, match="answered already, withdrawn, or never asked"):
        questions.answer("r", "q1-1", "carol", "decline", None)
