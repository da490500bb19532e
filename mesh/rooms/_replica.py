"""The seam through which rooms outlive their daemon: a lease, and a shared record of events.

A :class:`RoomManager` given a :class:`RoomReplica` (``mesh.cluster`` provides
one) runs a room only while it holds the room's lease, and only the lease's holder
records: each event goes to the shared record before its own store, behind the
holder's fence (a compare-and-set on the room's last event as the holder knows
it, so two daemons can never both record turn *n*). A daemon asks the holder to
pause, stop or resume a room it does not run, and hands it people's joins,
leaves and words; it leaves resuming rooms to the replica, which takes them over
when their holder's lease expires. The holder also hands the replica the pieces
of the replies its rooms are writing, for the observers on other daemons.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import msgspec

from mesh._orchestrator.access import Principal
from mesh.rooms._errors import RoomConflict
from mesh.rooms._events import DeltaEvent, RoomEvent
from mesh.rooms._model import RoomSnapshot

__all__ = ["Forwarded", "PersonOp", "RoomLeaseLost", "RoomOp", "RoomReplica", "qualified"]

RoomOp = Literal["pause", "stop", "resume"]
PersonOp = Literal["join", "leave", "say", "pass", "answer"]


class Forwarded(msgspec.Struct, frozen=True):
    """What the daemon that runs a room answered to a person's operation (JSON builtins)."""

    result: Any = None


class RoomLeaseLost(RoomConflict):
    """Another daemon recorded this room's next event first: it runs the room now (HTTP 409)."""


def qualified(identity: str | None, daemon: str | None) -> str | None:
    """``identity`` (``token:ID``) as the cluster names it: qualified by ``daemon``, the one
    its token belongs to, unless it already is (or there is no cluster: ``daemon`` None)."""
    if identity is None or daemon is None or "@" in identity:
        return identity
    return f"{identity}@{daemon}"


class RoomReplica(Protocol):
    """Leases and the shared record of room events; see the module docstring."""

    @property
    def daemon(self) -> str:
        """This daemon's id: it qualifies its tokens (``token:ID@daemon``), which are
        valid here only, wherever their rooms and seats are recorded."""
        ...

    def holds(self, room_id: str) -> bool:
        """Whether this daemon holds the room's lease now."""
        ...

    async def claim(self, room_id: str) -> bool:
        """Take the room's lease: True if this daemon holds it now, its store caught up."""
        ...

    async def release(self, room_id: str) -> None:
        """Give the lease back (the room stopped or paused here)."""
        ...

    async def record(self, event: RoomEvent) -> None:
        """Record ``event`` where every daemon reads it, only if it follows the last one there.

        Raises :class:`~mesh.rooms.RoomConflict` for a ``WELCOME`` whose room exists,
        and :class:`RoomLeaseLost` when another daemon recorded first.
        """
        ...

    def publish_live(self, event: DeltaEvent) -> None:
        """Show a piece of a reply being written here to the room's observers on the other
        daemons: best effort, never waiting (the ``MESSAGE`` that follows has the text)."""
        ...

    async def delete(self, room_id: str) -> None:
        """Take a stopped room out of the shared record, for every daemon.

        Raises :class:`~mesh.rooms.RoomConflict` when the record moved on since this
        daemon read it (another daemon resumed the room meanwhile).
        """
        ...

    async def forward(
        self, room_id: str, op: RoomOp, *, by: str | None = None, person: Principal | None = None
    ) -> RoomSnapshot | None:
        """Ask the daemon that runs the room to ``op`` it for ``by`` (the asking identity,
        qualified by this daemon; ``person``: its token as checked here), which that daemon
        checks against the room's owner; None if no other daemon runs it."""
        ...

    async def forward_person(
        self,
        room_id: str,
        op: PersonOp,
        args: dict[str, Any],
        person: Principal | None = None,
    ) -> Forwarded | None:
        """Hand a person's ``op`` (``args``: ``name`` or ``member``, ``text``, ``holder``,
        an answer's ``question``, ``action`` and ``content``;
        ``person``: their token, as checked here) to the daemon that runs the room; None
        if no other daemon runs it.

        Raises :class:`~mesh.Forbidden` when that daemon refuses the seat's holder."""
        ...
