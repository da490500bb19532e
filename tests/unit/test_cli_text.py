"""Output is data: control characters escaped for terminals, JSON kept exact; schemas as types."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, Literal

import msgspec
import pytest

from mesh import Agent
from mesh._text import json_text, printable
from mesh.cli._tools_table import format_tools, schema_type, usage


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text, ünïcödé ✓", "plain text, ünïcödé ✓"),
        ("keeps\ttabs\nand newlines", "keeps\ttabs\nand newlines"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
        ("\r\x00\x7f\x9b\x85", "\\x0d\\x00\\x7f\\x9b\\x85"),
        ("\u202eevil\u2066", "\\u202eevil\\u2066"),
    ],
)
def test_printable_escapes_every_control_but_newline_and_tab(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def test_json_text_is_exact_and_terminal_safe() -> None:
    value = {"m": "a\x1b[2J\x07\x7f\x9b\u202e\n\tb", "ü": ["✓", 1.5, None]}
    text = json_text(value, indent=2)
    assert not set(text) & {"\x1b", "\x07", "\x7f", "\x9b", "\u202e"}
    assert "ü" in text and "✓" in text  # not everything non-ASCII: only controls
    assert json.loads(text) == value


class Colour(Enum):
    RED = "red"


class Point(msgspec.Struct):
    x: float
    y: float


def tools_of(agent: Agent) -> list[dict[str, Any]]:
    return [tool.describe() for tool in agent.tools.values()]


def test_schemas_read_as_the_types_the_author_wrote() -> None:
    agent = Agent("types")

    @agent.tool
    def everything(
        text: Annotated[str, msgspec.Meta(max_length=10, description="short")],
        numbers: list[int],
        point: Point,
        mode: Literal["a", "b"],
        colour: Colour,
        maybe: float | None = None,
        table: dict[str, bool] | None = None,
    ) -> list[Point]:
        return []

    [tool] = tools_of(agent)
    props = tool["inputSchema"]["properties"]
    shown = {name: schema_type(prop, tool["inputSchema"]["$defs"]) for name, prop in props.items()}
    assert shown == {
        "text": "str",
        "numbers": "list[int]",
        "point": "Point",
        "mode": "'a' | 'b'",
        "colour": "Colour",
        "maybe": "float | None",
        "table": "dict[str, bool] | None",
    }
    assert schema_type(tool["outputSchema"]) == "list[Point]"
    assert usage(tool) == (
        "everything text=STR numbers=LIST[INT] point=POINT mode='a' | 'b' colour=COLOUR "
        "[maybe=FLOAT | NONE] [table=DICT[STR, BOOL] | NONE]"
    )
    table = format_tools([tool])
    assert "    text     str                     required  short; length <= 10" in table
    assert "    maybe    float | None            = None" in table
    assert format_tools([]) == "(no tools)"
