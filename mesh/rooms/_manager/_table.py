"""The rooms a manager holds in memory, over the store that has them all.

A room is loaded from the store when first asked for and dropped again once
nobody runs or watches it (:meth:`RoomTable.forget_if_idle`), so a long-lived
daemon holds only its live rooms' transcripts. Each :class:`HeldRoom` carries
its state, the journal its events are recorded through, its observers, its
engine while one runs, and the lock that orders pause / resume / stop / join.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final, ParamSpec, Protocol, TypeVar

import anyio
import anyio.to_thread

from mesh._orchestrator.access import Principal
from mesh.rooms._engine import Clock, Journal, RoomRunner
from mesh.rooms._errors import InvalidRoomSpec, RoomConflict, RoomNotFound
from mesh.rooms._events import DeltaEvent, LiveEvent, RoomEvent
from mesh.rooms._model import RoomStatus
from mesh.rooms._observers import Observers
from mesh.rooms._people import Desk
from mesh.rooms._replica import RoomReplica
from mesh.rooms._state import RoomState
from mesh.rooms._store import RoomStore

__all__ = ["Authorize", "HeldRoom", "RoomTable", "checked", "elsewhere", "in_thread"]

#: Pieces of a reply another daemon is writing that may wait for the event they follow
#: (they travel apart from the record, and may overtake it): a few seconds of a stream.
EARLY_PIECES: Final = 256


class Authorize(Protocol):
    """The orchestrator's door, asked ahead of a room's calls (raises :class:`~mesh.Forbidden`):
    may ``principal`` send ``method`` to ``agent``, with a deadline of ``timeout`` seconds?"""

    def __call__(
        self, agent: str, method: str, principal: Principal, timeout: float | None = None
    ) -> None: ...


P = ParamSpec("P")
T = TypeVar("T")


class HeldRoom:
    """One room this manager has in memory: state, journal, observers, engine."""

    def __init__(self, state: RoomState, journal: Journal, observers: Observers) -> None:
        self.state = state
        self.journal = journal
        self.observers = observers
        self.runner: RoomRunner | None = None
        self.scope: anyio.CancelScope | None = None  # the runner's, to drop it without a record
        self.control = anyio.Lock()  # one pause / resume / stop / join at a time
        self.desk = Desk()  # the people present, and their words on the way in
        #: Pieces from the room's holder that follow an event this store has not read yet.
        self.early: deque[DeltaEvent] = deque(maxlen=EARLY_PIECES)


class RoomTable:
    """The rooms in memory by id, the store, the clock, and the replica (if rooms are shared)."""

    def __init__(self, store: RoomStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.rooms: dict[str, HeldRoom] = {}
        #: Leases and a shared record of events when daemons share rooms (``mesh.cluster``
        #: sets it; the manager is then opened with ``resume=False``: the replica resumes).
        self.replica: RoomReplica | None = None

    def hold(self, state: RoomState) -> HeldRoom:
        observers = Observers(state.room.id)

        async def record(event: RoomEvent) -> None:
            if self.replica is not None:
                await self.replica.record(event)  # first: it decides who recorded turn n
            await in_thread(self.store.append, event)

        def publish_live(event: LiveEvent) -> None:
            observers.publish_live(event)
            if self.replica is not None and isinstance(event, DeltaEvent):
                self.replica.publish_live(event)  # to the observers on other daemons

        journal = Journal(
            state, record, observers.publish, clock=self.clock, publish_live=publish_live
        )
        room = self.rooms[state.room.id] = HeldRoom(state, journal, observers)
        return room

    async def load(self, room_id: str) -> HeldRoom:
        """The room in memory, loaded from the store if need be."""
        if room_id not in self.rooms:
            state = await in_thread(self.store.load, room_id)
            if state is None:
                raise RoomNotFound(room_id)
            if room_id not in self.rooms:  # another task may have loaded it meanwhile
                self.hold(state)
        return self.rooms[room_id]

    async def refresh(self, room: HeldRoom) -> None:
        """Apply to the room in memory what the store has that it lacks (others' events)."""
        state = room.state
        for event in await in_thread(self.store.events, state.room.id, state.last_seq):
            if event.seq == state.last_seq + 1:
                state.apply(event)
                room.observers.publish(event)

    @asynccontextmanager
    async def leased(self, room: HeldRoom) -> AsyncIterator[None]:
        """Hold the room's lease around a write to a room no daemon runs (only the holder
        records); use it under ``room.control``."""
        room_id = room.state.room.id
        replica = self.replica
        if replica is None or room.runner is not None:
            yield
            return
        ours = replica.holds(room_id)  # already (a take-over under way here): keep it
        if not await replica.claim(room_id):
            raise elsewhere(room_id)
        try:
            await self.refresh(room)  # the claim caught the store up: so must memory
            yield
        finally:
            if not ours and room.runner is None:
                with anyio.CancelScope(shield=True):
                    await replica.release(room_id)

    async def drop(self, room: HeldRoom) -> None:
        room_id = room.state.room.id
        room.observers.close()
        if self.rooms.get(room_id) is room:
            del self.rooms[room_id]
        await in_thread(self.store.delete, room_id)

    def forget_if_idle(self, room: HeldRoom) -> None:
        # A room nobody runs or watches is dropped from memory (the store has it
        # all), so a long-lived daemon holds only its live rooms' transcripts.
        room_id = room.state.room.id
        busy = room.runner is not None or len(room.observers) or room.control.locked()
        if busy or room.state.status is RoomStatus.RUNNING:
            return
        if self.rooms.get(room_id) is room:
            del self.rooms[room_id]

    def close(self) -> None:
        """Close every room's observers and let go of them all (the manager is closing)."""
        for room in self.rooms.values():
            room.observers.close()
        self.rooms.clear()


async def in_thread(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return await anyio.to_thread.run_sync(lambda: function(*args, **kwargs))


def elsewhere(room_id: str) -> RoomConflict:
    return RoomConflict(f"room {room_id!r} runs on another daemon; try again", room=room_id)


def checked(clean: Callable[[str], str], value: str) -> str:
    """``clean(value)``, its ``ValueError`` as the room error the API reports (400)."""
    try:
        return clean(value)
    except ValueError as exc:
        raise InvalidRoomSpec(str(exc)) from None
