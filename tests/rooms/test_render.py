"""Rooms for people: events as lines (plain and coloured), transcripts as Markdown."""

from __future__ import annotations

import re
import time
from typing import Any

from mesh.rooms import (
    AgentJoinedEvent,
    AgentLeftEvent,
    ErrorEvent,
    MessageEvent,
    ResumedEvent,
    RoomEvent,
    RoomSnapshot,
    RoomStatus,
    StoppedEvent,
    StopReason,
    WelcomeEvent,
    format_event,
    transcript_markdown,
)

from ._helpers import ROOM, make_room

AT = 1_767_772_800_000
HHMMSS = time.strftime("%H:%M:%S", time.localtime(AT / 1000))


def test_each_event_as_a_line() -> None:
    room = make_room()
    bob: dict[str, Any] = {"agent_id": "bob", "name": "Bob", "role": "critic"}
    cases: list[tuple[RoomEvent, str]] = [
        (
            WelcomeEvent(room_id=ROOM, timestamp=AT, room=room),
            'room r1: "tabs or spaces" with Alice (participant), Bob (participant); '
            "chat, at most 40 turns",
        ),
        (AgentJoinedEvent(room_id=ROOM, timestamp=AT, **bob), "Bob (critic) joined"),
        (
            AgentLeftEvent(room_id=ROOM, timestamp=AT, reason="offline", **bob),
            "Bob (critic) left (offline)",
        ),
        (AgentLeftEvent(room_id=ROOM, timestamp=AT, reason="left", **bob), "Bob (critic) left"),
        (
            StoppedEvent(
                room_id=ROOM, timestamp=AT, reason=StopReason.PAUSED, turn=8, detail="on request"
            ),
            "paused after turn 8 (on request)",
        ),
        (
            ErrorEvent(room_id=ROOM, timestamp=AT, message="boom", turn=3, attempt=2, **bob),
            "error at turn 3 (Bob, attempt 2): boom",
        ),
        (ResumedEvent(room_id=ROOM, timestamp=AT, next_turn=4), "resumed at turn 4"),
        (
            StoppedEvent(
                room_id=ROOM,
                timestamp=AT,
                reason=StopReason.GOODBYE,
                turn=12,
                detail="Bob said goodbye",
            ),
            "stopped after turn 12, GOODBYE: Bob said goodbye",
        ),
    ]
    for event, line in cases:
        assert format_event(event) == f"[{HHMMSS}] {line}"


def test_a_message_with_its_speaker_turn_and_score() -> None:
    message = MessageEvent(
        room_id=ROOM,
        timestamp=AT,
        agent_id="bob",
        name="Bob",
        role="critic",
        turn=2,
        text="Two lines,\nexactly.",
        score=0.4321,
    )
    assert (
        format_event(message)
        == f"[{HHMMSS}] Bob (critic), turn 2: (score 0.43)\n  Two lines,\n  exactly."
    )
    coloured = format_event(message, room=make_room(), color=True)
    assert "\x1b[1m\x1b[32mBob (critic), turn 2:\x1b[0m" in coloured  # the second member is green
    assert coloured.endswith("  Two lines,\n  exactly.")


def test_a_transcript_as_markdown() -> None:
    room = make_room()
    snapshot = RoomSnapshot(
        room=room,
        status=RoomStatus.STOPPED,
        current_turn=1,
        stop_reason=StopReason.MAX_TURNS,
        detail="reached the limit",
    )
    messages = [
        MessageEvent(
            room_id=ROOM,
            timestamp=AT,
            agent_id="alice",
            name="Alice",
            role="participant",
            turn=1,
            text="Tabs.",
            score=0.0,
        )
    ]
    assert transcript_markdown(snapshot, messages) == "\n".join(
        [
            "# tabs or spaces",
            "",
            "- Room: `r1` (chat)",
            "- Members: Alice (participant), Bob (participant)",
            "- Status: stopped, MAX_TURNS: reached the limit",
            "",
            "## Turn 1: Alice (participant)",
            "",
            f"*{HHMMSS}, convergence score 0.00*",
            "",
            "Tabs.",
            "",
        ]
    )


def test_what_agents_and_clients_wrote_cannot_drive_the_terminal() -> None:
    """Escape sequences, an OSC title and BEL are shown as text; newlines and tabs stay."""
    hostile = "\x1b]0;pwned\x07\x1b[2J\x9b31mred\u202e\tok\nline two"
    message = MessageEvent(
        room_id=ROOM,
        timestamp=AT,
        agent_id="bob",
        name="Bob\x1b[5m",
        role="critic",
        turn=2,
        text=hostile,
        score=0.5,
    )
    shown = format_event(message, room=make_room(), color=True)
    body = shown.split("\n", 1)[1]
    assert body == "  \\x1b]0;pwned\\x07\\x1b[2J\\x9b31mred\\u202e\tok\n  line two"
    assert "Bob\\x1b[5m (critic)" in shown
    # The only escape sequences left are the colours format_event chose.
    assert set(re.findall(r"\x1b\[[0-9;]*m", shown)) <= {
        "\x1b[0m",
        "\x1b[1m",
        "\x1b[2m",
        "\x1b[32m",
    }
    assert not {"\x07", "\x9b", "\u202e"} & set(shown)
    snapshot = RoomSnapshot(room=make_room(), status=RoomStatus.STOPPED, detail="\x07done")
    markdown = transcript_markdown(snapshot, [message])
    assert "\x1b" not in markdown and "\x07" not in markdown and "\x9b" not in markdown
    assert "\\x1b]0;pwned\\x07" in markdown and "\tok\nline two" in markdown
