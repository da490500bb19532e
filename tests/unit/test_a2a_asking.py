"""The answer a follow-up message gives to a task's question (mesh.a2a._asking): pure rules."""

from __future__ import annotations

from typing import Any

import pytest

from mesh.a2a._asking import AnswerError, answer_of

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
FORM = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Oslo", "Lima"]},
        "nights": {"type": "integer"},
        "price": {"type": "number"},
        "breakfast": {"type": "boolean"},
        "extras": {"type": "array", "items": {"enum": ["spa", "gym"]}},
    },
    "required": ["city", "nights"],
}


def said(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"messageId": "m2", "role": "ROLE_USER", "taskId": "t", "parts": list(parts)}


def test_text_answers_a_question_of_one_string_field() -> None:
    answer = answer_of(said({"text": "Ada"}), {"k": "v"}, NAME)
    assert answer["action"] == "accept" and answer["content"] == {"name": "Ada"}
    assert answer["_meta"]["a2a"]["messageId"] == "m2"
    assert answer["_meta"]["a2a"]["requestMetadata"] == {"k": "v"}


def test_a_data_part_answers_a_form_numbers_as_json_schema_counts_them() -> None:
    content = {"city": "Oslo", "nights": 2.0, "price": 9.5, "breakfast": True, "extras": ["spa"]}
    answer = answer_of(said({"data": content}), {}, FORM)
    assert answer["content"] == {**content, "nights": 2}
    assert isinstance(answer["content"]["nights"], int)


@pytest.mark.parametrize(
    ("parts", "words"),
    [
        ([{"text": "Oslo"}], "text answers a question of one string field"),
        ([{"data": {"city": "Oslo"}}], "needs the field 'nights'"),
        ([{"data": {"city": "Rome", "nights": 1}}], "'Rome' is none of"),
        ([{"data": {"city": "Oslo", "nights": 1.5}}], "'nights' must be integer"),
        ([{"data": {"city": "Oslo", "nights": True}}], "'nights' must be integer"),
        ([{"data": {"city": "Oslo", "nights": 1, "pets": 2}}], "no field 'pets'"),
        ([{"data": {"city": "Oslo", "nights": 1, "extras": ["sauna"]}}], "'sauna' is none of"),
        ([{"data": ["Oslo"]}], "an object of the question's fields"),
        ([{"url": "https://example.com/a.txt"}], "a data part"),
    ],
)
def test_what_does_not_answer_the_question_says_why(parts: list[Any], words: str) -> None:
    with pytest.raises(AnswerError, match=words):
        answer_of(said(*parts), {}, FORM)
