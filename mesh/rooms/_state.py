"""A room's state as a fold over its events: what the engine, the store and resume agree on.

Applying the events of a room's log in order gives its status, its stop reason
and its transcript; the engine applies each event as it records it, the store
keeps the same projection in SQLite, and a log read back after a crash rebuilds
the same state (a test checks all three agree).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from mesh.rooms._events import (
    AgentJoinedEvent,
    MessageEvent,
    PointEvent,
    ResumedEvent,
    RoomEvent,
    StoppedEvent,
    WelcomeEvent,
)
from mesh.rooms._model import Member, Room, RoomSnapshot, RoomStatus, StopReason

__all__ = ["RoomState", "seated"]


def seated(room: Room, member: Member) -> Room:
    """``room`` with ``member`` in a seat at the end (no change if it has one)."""
    if any(m.id == member.id for m in room.members):
        return room
    return msgspec.structs.replace(room, members=(*room.members, member))


@dataclass
class RoomState:
    """One room: its fixed configuration, where it is, and what was said."""

    room: Room
    status: RoomStatus = RoomStatus.RUNNING
    stop_reason: StopReason | None = None
    detail: str = ""
    last_seq: int = 0
    updated_at: int = 0
    transcript: list[MessageEvent] = field(default_factory=list)
    #: Who holds each person's seat: the first identity that took it (see AGENT_JOINED).
    holders: dict[str, str] = field(default_factory=dict)
    #: A room with an agenda: the point it is on (None before its first ``POINT``), and
    #: how many messages of the transcript came before that point.
    point: int | None = None
    point_since: int = 0

    @property
    def current_turn(self) -> int:
        """The last turn whose message is recorded (0 before the first)."""
        return self.transcript[-1].turn if self.transcript else 0

    @property
    def on_point(self) -> list[MessageEvent]:
        """The messages said on the current agenda point (all of them without an agenda)."""
        return self.transcript[self.point_since :]

    @property
    def point_text(self) -> str | None:
        """The agenda point the room is on, in words (None without an agenda)."""
        agenda = self.room.agenda
        return agenda[self.point or 0] if agenda else None

    def apply(self, event: RoomEvent) -> None:
        """Fold one event in. Events must come in ``seq`` order, each once."""
        if event.seq != self.last_seq + 1:
            raise ValueError(
                f"room {self.room.id}: event seq {event.seq} does not follow {self.last_seq}"
            )
        self.last_seq = event.seq
        self.updated_at = event.timestamp
        if isinstance(event, MessageEvent):
            self.transcript.append(event)
        elif isinstance(event, StoppedEvent):
            paused = event.reason is StopReason.PAUSED
            self.status = RoomStatus.PAUSED if paused else RoomStatus.STOPPED
            self.stop_reason = event.reason
            self.detail = event.detail
        elif isinstance(event, PointEvent):
            self.point, self.point_since = event.index, len(self.transcript)
        elif isinstance(event, AgentJoinedEvent):
            if event.member is not None:
                self.room = seated(self.room, event.member)
            if event.holder is not None:
                self.holders.setdefault(event.agent_id, event.holder)
        elif isinstance(event, ResumedEvent | WelcomeEvent):
            self.status = RoomStatus.RUNNING
            self.stop_reason = None
            self.detail = ""

    def snapshot(self) -> RoomSnapshot:
        return RoomSnapshot(
            room=self.room,
            status=self.status,
            current_turn=self.current_turn,
            stop_reason=self.stop_reason,
            detail=self.detail,
            last_seq=self.last_seq,
            updated_at=self.updated_at,
        )

    @classmethod
    def from_events(cls, events: Iterable[RoomEvent]) -> RoomState:
        """Replay a room's log; it must open with its ``WELCOME``."""
        iterator = iter(events)
        first = next(iterator, None)
        if not isinstance(first, WelcomeEvent):
            raise TypeError("a room's log must start with its WELCOME event")
        state = cls(room=first.room)
        state.apply(first)
        for event in iterator:
            state.apply(event)
        return state
