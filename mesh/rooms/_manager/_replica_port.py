"""What the replica asks of a manager when daemons share rooms (see :mod:`mesh.rooms._replica`).

The replica hands over events others recorded (:meth:`ReplicaPort.absorb`), a
room whose lease this daemon now holds (:meth:`ReplicaPort.take_over`), a
room another daemon deleted (:meth:`ReplicaPort.forget`), and the pieces of a
reply the room's holder is writing (:meth:`ReplicaPort.show_live`).

A piece carries the ``seq`` of the last event its holder recorded. It travels
apart from the record and may arrive before that event has been read here: it
then waits in the room's bounded ``early`` queue and is shown right after the
event, so an observer here sees a turn's pieces after the turn before it, as an
observer on the holder does.
"""

from __future__ import annotations

from mesh._logging import get_logger
from mesh.rooms._events import DeltaEvent, ResumedEvent, RoomEvent
from mesh.rooms._manager._engines import Engines
from mesh.rooms._manager._table import HeldRoom, RoomTable, in_thread
from mesh.rooms._model import RoomStatus

__all__ = ["ReplicaPort"]

log = get_logger("mesh.rooms")


class ReplicaPort:
    """The manager's side of the shared record; see the module docstring."""

    def __init__(self, table: RoomTable, engines: Engines) -> None:
        self._table = table
        self._engines = engines

    async def absorb(self, event: RoomEvent, *, ours: bool = False) -> None:
        try:
            await in_thread(self._table.store.append, event)
        except ValueError as exc:  # a gap: the stream and this store disagree
            log.error("room.absorb_failed", room=event.room_id, seq=event.seq, error=str(exc))
            return
        room = self._table.rooms.get(event.room_id)
        if ours or room is None or room.runner is not None:
            return
        if event.seq == room.state.last_seq + 1:
            room.state.apply(event)
            room.observers.publish(event)
        else:
            await self._table.refresh(room)
        if room.early:
            _show_early(room)

    def watched_live(self, room_id: str) -> bool:
        """Whether an observer here asked for the pieces of a room another daemon runs."""
        room = self._table.rooms.get(room_id)
        return room is not None and room.runner is None and room.observers.want_live()

    def show_live(self, event: DeltaEvent) -> None:
        """Show a piece of a reply the room's holder is writing to the observers here that
        asked for them: now, or once the event it follows is read (a stale one: never)."""
        room = self._table.rooms.get(event.room_id)
        if room is None or room.runner is not None:
            return
        if event.seq == room.state.last_seq and not room.early:
            room.observers.publish_live(event)
        elif event.seq > room.state.last_seq:
            room.early.append(event)  # bounded: the oldest go first

    async def take_over(self, room_id: str) -> bool:
        room = await self._table.load(room_id)
        async with room.control:
            if room.runner is not None:
                return True
            await self._table.refresh(room)
            state = room.state
            if state.status is not RoomStatus.RUNNING:
                return False
            log.info("room.taking_over", room=room_id, next_turn=state.current_turn + 1)
            await room.journal.emit(
                ResumedEvent(room_id=state.room.id, next_turn=state.current_turn + 1)
            )
            self._engines.start(room)
            return True

    async def forget(self, room_id: str) -> None:
        room = self._table.rooms.get(room_id)
        if room is None:
            await in_thread(self._table.store.delete, room_id)
        else:
            async with room.control:
                if room.scope is not None:
                    room.scope.cancel()
                await self._table.drop(room)
        log.info("room.forgotten", room=room_id)


def _show_early(room: HeldRoom) -> None:
    """The held-back pieces that follow the room's last event now; drop the stale ones."""
    last = room.state.last_seq
    while room.early and room.early[0].seq <= last:
        piece = room.early.popleft()
        if piece.seq == last:
            room.observers.publish_live(piece)
