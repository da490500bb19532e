"""A room's events, a turn-taking conversation made durable.

One tagged union on ``type``: ``WELCOME`` (the room, once, first), ``AGENT_JOINED``,
``MESSAGE``, ``AGENT_LEFT``, ``ERROR``, ``RESUMED``, ``STOPPED``, ``POINT`` (a
room with an agenda reached its next point), and ``QUESTION`` and ``ANSWER`` (a
member asked the room's people something mid-turn, and how it was answered). Every event
carries the room id, a sequence number (1, 2, 3… per room: the order observers
see, the key that makes writes idempotent, and where a reconnecting observer
picks up), an epoch-millisecond timestamp, and the agent it is about: its id,
name and role (``system`` for the room's own events). The same bytes go to the
JSONL log, the SQLite store and observers.

``DELTA`` is not one of them: it carries a piece of a reply still being
written, to observers that asked for it (``deltas=True``), live only. It is
never recorded and has no ``seq`` of its own (it carries the last recorded one);
the ``MESSAGE`` that follows holds the whole text, and an ``ERROR`` instead of
it means the pieces so far were not a reply.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

import msgspec

from mesh.rooms._model import Member, Room, RoomId, Step, StopReason

__all__ = [
    "ANSWER_ACTIONS",
    "EVENT_TYPES",
    "SYSTEM",
    "AgentJoinedEvent",
    "AgentLeftEvent",
    "AnswerEvent",
    "DeltaEvent",
    "ErrorEvent",
    "LiveEvent",
    "MessageEvent",
    "PointEvent",
    "QuestionEvent",
    "ResumedEvent",
    "RoomEvent",
    "StoppedEvent",
    "WelcomeEvent",
    "decode_event",
    "decode_live_event",
    "encode_event",
]

#: The agent id, name and role of events the room itself speaks.
SYSTEM: Final = "system"


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    # seq and timestamp are 0 until the room's journal numbers and stamps the event.
    room_id: RoomId
    seq: int = 0
    timestamp: int = 0
    agent_id: str = SYSTEM
    name: str = "System"
    role: str = SYSTEM


class WelcomeEvent(_Event, frozen=True, kw_only=True, tag="WELCOME"):
    """The room was created: the whole configuration, so the log alone rebuilds it."""

    room: Room

    @property
    def topic(self) -> str:
        return self.room.topic

    @property
    def members(self) -> tuple[Member, ...]:
        return self.room.members


class AgentJoinedEvent(_Event, frozen=True, kw_only=True, tag="AGENT_JOINED"):
    """A member is in the room: at creation, back online, or a person joining.

    ``member`` is set when someone takes a new seat (a person joining a running
    room): the room's members grow by it from this event on. ``holder`` is the
    daemon identity that took a person's seat (the first one holds it for good,
    across leaving and restarts); ``by`` the name of its token, shown beside them.
    """

    member: Member | None = None
    holder: str | None = None
    by: str | None = None


class MessageEvent(_Event, frozen=True, kw_only=True, tag="MESSAGE"):
    """A member spoke at ``turn``. ``score`` is the convergence score after it.

    ``interjection``: a person spoke between turns, not in their own; who speaks
    next is decided as if it had not happened.
    """

    turn: int
    text: str
    score: float = 0.0
    step: Step | None = None
    interjection: bool = False


class AgentLeftEvent(_Event, frozen=True, kw_only=True, tag="AGENT_LEFT"):
    """A member went offline; the room waits ``agent_grace`` seconds for it."""

    reason: str = ""


class ErrorEvent(_Event, frozen=True, kw_only=True, tag="ERROR"):
    """An attempt at ``turn`` failed (``attempt`` counts from 1); it will be retried."""

    message: str
    turn: int = 0
    attempt: int = 0
    code: int | None = None


class ResumedEvent(_Event, frozen=True, kw_only=True, tag="RESUMED"):
    """The room runs again (after a pause, a resumable stop, or a restart)."""

    next_turn: int


class StoppedEvent(_Event, frozen=True, kw_only=True, tag="STOPPED"):
    """The room stopped at ``turn`` (its last recorded message) for ``reason``."""

    reason: StopReason
    turn: int
    detail: str = ""


class PointEvent(_Event, frozen=True, kw_only=True, tag="POINT"):
    """The room is on agenda point ``index`` (counted from 0), ``point``, from after ``turn``.

    Recorded before the room's first turn, and each time it moves on; ``detail``
    says why it moved on (the loop guard's words, or the turns per point).
    """

    index: int
    point: str
    turn: int = 0
    detail: str = ""


class QuestionEvent(_Event, frozen=True, kw_only=True, tag="QUESTION"):
    """The member speaking at ``turn`` asks the room's people something (an elicitation).

    ``question`` names it for the answer; ``message`` and ``schema`` are what the
    member asked (MCP's ``requestedSchema``: an object of primitive fields). Any
    person present may answer it, until ``deadline`` (epoch milliseconds, the turn's
    own); an ``ANSWER`` with the same ``question`` always follows.
    """

    turn: int
    question: str
    message: str
    schema: dict[str, Any]
    deadline: int | None = None


#: How a question ends: a person accepts (with ``content``), declines or cancels it, or
#: the room withdraws it (the turn ended first: its deadline, a pause, a stop).
ANSWER_ACTIONS: Final = ("accept", "decline", "cancel", "withdrawn")


class AnswerEvent(_Event, frozen=True, kw_only=True, tag="ANSWER"):
    """How ``question`` (asked at ``turn``) ended, and by whom (the person; ``system``
    when withdrawn, with ``reason``). ``content`` holds the accepted fields."""

    turn: int
    question: str
    action: Literal["accept", "decline", "cancel", "withdrawn"]
    content: dict[str, Any] | None = None
    reason: str = ""


class DeltaEvent(_Event, frozen=True, kw_only=True, tag="DELTA"):
    """A piece of the reply ``agent_id`` is writing for ``turn`` (live only, never stored).

    Each turn opens with one whose ``text`` is empty: the turn is theirs now (for
    a person: the room waits for their message, until ``deadline``, epoch
    milliseconds). ``at`` is where ``text`` starts in the reply, so a reader
    can place each piece exactly: an observer arriving mid-reply is sent the
    reply so far as one piece at 0, and pieces it then gets twice land on the
    same place. A turn the room asks again (``Limits.redraws``) opens again, as ``draw``
    1, 2, …, with ``redraw`` saying what was wrong with the reply it set aside.
    """

    turn: int
    text: str
    at: int = 0
    deadline: int | None = None
    draw: int = 0
    redraw: str = ""


RoomEvent: TypeAlias = (
    WelcomeEvent
    | AgentJoinedEvent
    | MessageEvent
    | AgentLeftEvent
    | ErrorEvent
    | ResumedEvent
    | StoppedEvent
    | PointEvent
    | QuestionEvent
    | AnswerEvent
)

#: The ``type`` values, in the order the docs list them.
EVENT_TYPES: Final = (
    "WELCOME",
    "AGENT_JOINED",
    "MESSAGE",
    "AGENT_LEFT",
    "ERROR",
    "RESUMED",
    "STOPPED",
    "POINT",
    "QUESTION",
    "ANSWER",
)

#: What an observer may receive: the recorded events, and the deltas if it asked.
LiveEvent: TypeAlias = RoomEvent | DeltaEvent

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(RoomEvent)
_LIVE_DECODER: Final = msgspec.json.Decoder(LiveEvent)


def encode_event(event: LiveEvent) -> bytes:
    """One event as compact JSON (no newline)."""
    return _ENCODER.encode(event)


def decode_event(data: bytes | str) -> RoomEvent:
    """The event in ``data``; raises ``msgspec.DecodeError`` / ``ValidationError`` with the path."""
    event: RoomEvent = _DECODER.decode(data)
    return event


def decode_live_event(data: bytes | str) -> LiveEvent:
    """A recorded event or a ``DELTA``, as an observer that asked for deltas receives them."""
    event: LiveEvent = _LIVE_DECODER.decode(data)
    return event
