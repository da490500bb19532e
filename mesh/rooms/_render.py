"""Rooms for people: one event as a line of text (coloured on a terminal), a transcript as Markdown.

What ``mesh room run`` prints as a room goes, what ``make demo`` narrates, and what
``mesh room export --format md`` writes. Pure functions of the events. Everything
an agent or a client wrote (texts, names, roles, topics, ids, reasons) passes
through :func:`~mesh._text.printable`, so it cannot drive the reader's terminal;
only the colours added here are escape sequences.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

from mesh._text import printable
from mesh.rooms._events import (
    AgentJoinedEvent,
    AgentLeftEvent,
    AnswerEvent,
    DeltaEvent,
    ErrorEvent,
    LiveEvent,
    MessageEvent,
    PointEvent,
    QuestionEvent,
    ResumedEvent,
    RoomEvent,
    StoppedEvent,
    WelcomeEvent,
)
from mesh.rooms._model import Room, RoomSnapshot, StopReason

__all__ = ["format_event", "transcript_markdown"]

_RESET: Final = "\x1b[0m"
_BOLD: Final = "\x1b[1m"
_DIM: Final = "\x1b[2m"
_RED: Final = "\x1b[31m"
_YELLOW: Final = "\x1b[33m"
#: Speakers' colours, by their place in the room: cyan, green, magenta, blue.
_SPEAKERS: Final = ("\x1b[36m", "\x1b[32m", "\x1b[35m", "\x1b[34m")


def _clock(timestamp: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(timestamp / 1000))


def _paint(text: str, *codes: str, color: bool) -> str:
    return f"{''.join(codes)}{text}{_RESET}" if color and codes else text


def format_event(event: LiveEvent, *, room: Room | None = None, color: bool = False) -> str:
    """``[hh:mm:ss] Name (role), turn N:`` and the text, or one line for the other events.

    ``room`` (from the ``WELCOME``) gives each speaker its own colour. A ``DELTA``
    is its piece of text alone, to be printed without a newline after the last.
    """
    if isinstance(event, DeltaEvent):
        return event.text
    stamp = _paint(f"[{_clock(event.timestamp)}]", _DIM, color=color)
    who = _who(event.name, event.role)
    if isinstance(event, MessageEvent):
        hue = _SPEAKERS[_place(room, event.agent_id) % len(_SPEAKERS)]
        step = f", {event.step}" if event.step else ""
        step += ", between turns" if event.interjection else ""
        head = _paint(f"{who}, turn {event.turn}{step}:", _BOLD, hue, color=color)
        score = _paint(f" (score {event.score:.2f})", _DIM, color=color)
        body = "\n".join(f"  {line}" for line in printable(event.text).splitlines() or [""])
        return f"{stamp} {head}{score}\n{body}"
    if isinstance(event, PointEvent):
        return f"{stamp} {_paint(_point(event, room), _BOLD, color=color)}"
    if isinstance(event, QuestionEvent | AnswerEvent):
        return f"{stamp} {_paint(_asked(event, who), _BOLD, _YELLOW, color=color)}"
    return f"{stamp} {_paint(_line(event, who), *_tone(event), color=color)}"


def _asked(event: QuestionEvent | AnswerEvent, who: str) -> str:
    """A member's question to the people (with what it asks for), or how it ended."""
    if isinstance(event, QuestionEvent):
        fields = ", ".join(
            f"{printable(str(name))}: {printable(str(spec.get('type', '?')))}"
            for name, spec in (event.schema.get("properties") or {}).items()
            if isinstance(spec, dict)
        )
        return (
            f"{who} asks the room's people (question {printable(event.question)}, turn"
            f" {event.turn}): {printable(event.message)} [{fields or 'no fields'}]"
        )
    if event.action == "withdrawn":
        return f"question {printable(event.question)} withdrawn: {printable(event.reason)}"
    content = ""
    if event.content:
        content = ": " + ", ".join(
            f"{printable(str(k))}={printable(str(v))}" for k, v in event.content.items()
        )
    return f"{who} answered question {printable(event.question)}, {event.action}{content}"


def _point(event: PointEvent, room: Room | None) -> str:
    """``point 2 of 5: <point>``, and why the room moved on to it."""
    of = f" of {len(room.agenda)}" if room is not None and room.agenda else ""
    head = "point" if event.index == 0 else "next point"
    detail = f" ({printable(event.detail)})" if event.detail else ""
    return f"{head}, {event.index + 1}{of}: {printable(event.point)}{detail}"


def _who(name: str, role: str) -> str:
    return f"{printable(name)} ({printable(role)})"


def _members(room: Room) -> str:
    return ", ".join(_who(m.name, m.role) for m in room.members)


def _place(room: Room | None, agent_id: str) -> int:
    ids: list[str] = [m.id for m in room.members] if room is not None else []
    return ids.index(agent_id) if agent_id in ids else 0


def _tone(event: RoomEvent) -> tuple[str, ...]:
    if isinstance(event, ErrorEvent):
        return (_RED,)
    if isinstance(event, StoppedEvent):
        return (_BOLD, _YELLOW)
    return (_DIM,)


def _line(event: RoomEvent, who: str) -> str:
    if isinstance(event, WelcomeEvent):
        room = event.room
        unit = "rounds" if room.mode == "review" else "turns"
        return (
            f'room {printable(room.id)}: "{printable(room.topic)}" with {_members(room)}; '
            f"{room.mode}, at most {room.max_turns} {unit}"
            + (f", {len(room.agenda)} points on the agenda" if room.agenda else "")
        )
    if isinstance(event, AgentJoinedEvent):
        return f"{who} joined"
    if isinstance(event, AgentLeftEvent):
        # A person who leaves on their own has the reason "left": saying it twice is noise.
        if event.reason and event.reason != "left":
            return f"{who} left ({printable(event.reason)})"
        return f"{who} left"
    if isinstance(event, ErrorEvent):
        attempt = f"{printable(event.name)}, attempt {event.attempt}"
        return f"error at turn {event.turn} ({attempt}): {printable(event.message)}"
    if isinstance(event, ResumedEvent):
        return f"resumed at turn {event.next_turn}"
    if isinstance(event, PointEvent):
        return _point(event, None)
    if isinstance(event, StoppedEvent):
        if event.reason is StopReason.PAUSED:  # not a stop: the room goes on when resumed
            detail = f" ({printable(event.detail)})" if event.detail else ""
            return f"paused after turn {event.turn}{detail}"
        detail = f": {printable(event.detail)}" if event.detail else ""
        return f"stopped after turn {event.turn}, {event.reason}{detail}"
    raise TypeError(f"not a room event: {event!r}")  # pragma: no cover


def transcript_markdown(snapshot: RoomSnapshot, events: Sequence[RoomEvent]) -> str:
    """The room and what was said, as a Markdown document.

    ``events`` are its messages, and may include its stops and resumes (a pause and
    a resume show where they happened) and its agenda's points (each a heading);
    other events are left out.
    """
    room = snapshot.room
    status = str(snapshot.status)
    if snapshot.stop_reason is not None:
        status += f", {snapshot.stop_reason}"
        if snapshot.detail:
            status += f": {printable(snapshot.detail)}"
    lines = [
        f"# {printable(room.topic)}",
        "",
        f"- Room: `{printable(room.id)}` ({room.mode})",
        f"- Members: {_members(room)}",
        f"- Status: {status}",
    ]
    if room.agenda:
        lines.append(f"- Agenda: {'; '.join(printable(point) for point in room.agenda)}")
    lines.append("")
    for event in events:
        if isinstance(event, MessageEvent):
            step = f", {event.step}" if event.step else ""
            lines += [
                f"## Turn {event.turn}: {printable(event.name)} ({printable(event.role)}{step})",
                "",
                f"*{_clock(event.timestamp)}, convergence score {event.score:.2f}*",
                "",
                printable(event.text),
                "",
            ]
        elif isinstance(event, PointEvent):
            lines += [f"## {_point(event, room).capitalize()}", ""]
        elif isinstance(event, StoppedEvent | ResumedEvent):
            lines += [f"*{_clock(event.timestamp)}: {_line(event, '')}*", ""]
        elif isinstance(event, QuestionEvent | AnswerEvent):
            who = _who(event.name, event.role)
            lines += [f"*{_clock(event.timestamp)}: {_asked(event, who)}*", ""]
    return "\n".join(lines)
