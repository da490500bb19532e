"""A room's events, the pingpong protocol of seed 000 made durable.

One tagged union on ``type``: ``WELCOME`` (the room, once, first), ``AGENT_JOINED``,
``MESSAGE``, ``AGENT_LEFT``, ``ERROR``, ``RESUMED`` and ``STOPPED``. Every event
carries the room id, a sequence number (1, 2, 3… per room: the order observers
see, the key that makes writes idempotent, and where a reconnecting observer
picks up), an epoch-millisecond timestamp, and the agent it is about: its id,
name and role (``system`` for the room's own events). The same bytes go to the
JSONL log, the SQLite store and observers.
"""

from __future__ import annotations

from typing import Final, TypeAlias

import msgspec

from mesh.rooms._model import Member, Room, RoomId, Step, StopReason

__all__ = [
    "EVENT_TYPES",
    "SYSTEM",
    "AgentJoinedEvent",
    "AgentLeftEvent",
    "ErrorEvent",
    "MessageEvent",
    "ResumedEvent",
    "RoomEvent",
    "StoppedEvent",
    "WelcomeEvent",
    "decode_event",
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
    """A member is in the room: at creation, or back online after leaving."""


class MessageEvent(_Event, frozen=True, kw_only=True, tag="MESSAGE"):
    """A member spoke at ``turn``. ``score`` is the convergence score after it."""

    turn: int
    text: str
    score: float = 0.0
    step: Step | None = None


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


RoomEvent: TypeAlias = (
    WelcomeEvent
    | AgentJoinedEvent
    | MessageEvent
    | AgentLeftEvent
    | ErrorEvent
    | ResumedEvent
    | StoppedEvent
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
)

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(RoomEvent)


def encode_event(event: RoomEvent) -> bytes:
    """One event as compact JSON (no newline)."""
    return _ENCODER.encode(event)


def decode_event(data: bytes | str) -> RoomEvent:
    """The event in ``data``; raises ``msgspec.DecodeError`` / ``ValidationError`` with the path."""
    event: RoomEvent = _DECODER.decode(data)
    return event
