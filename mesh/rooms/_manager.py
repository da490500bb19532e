"""The RoomManager: every room of a daemon, their engines, their store and their observers.

``async with RoomManager(data_dir, speak=...) as rooms:`` opens the store
(replaying whatever the logs hold that SQLite missed), resumes every room that
was running when the process stopped, and, given a registry, follows its
members' comings and goings. Leaving the block stops the engines *without*
recording a stop: those rooms are still running as far as the store knows, and
the next manager on the same directory resumes them at their next turn.

:meth:`RoomManager.for_orchestrator` wires it to a :class:`~mesh.MeshOrchestrator`
(``room/turn`` and ``room/persona`` calls, the orchestrator's registry), which
is what the daemon uses.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, ParamSpec, Self, TypeVar, cast

import anyio
import anyio.abc
import anyio.to_thread
import msgspec

from mesh._errors import MeshError
from mesh._logging import get_logger
from mesh._orchestrator.access import EMBEDDER, Principal
from mesh.protocol import now_ms
from mesh.rooms._engine import Clock, Journal, Presence, RoomRunner, Speak, acting
from mesh.rooms._errors import InvalidRoomSpec, RoomConflict, RoomNotFound
from mesh.rooms._events import (
    AgentJoinedEvent,
    AgentLeftEvent,
    LiveEvent,
    MessageEvent,
    ResumedEvent,
    RoomEvent,
    StoppedEvent,
    WelcomeEvent,
)
from mesh.rooms._mesh import (
    PRESENT,
    ROOM_TURN,
    Describe,
    mesh_describer,
    mesh_speaker,
    registry_presence,
)
from mesh.rooms._model import (
    DEFAULT_MAX_TURNS,
    Member,
    Room,
    RoomId,
    RoomSnapshot,
    RoomSpec,
    RoomStatus,
    StopReason,
)
from mesh.rooms._observers import DEFAULT_OBSERVER_BUFFER, Observers, RoomEvents
from mesh.rooms._people import (
    Desk,
    check_join,
    check_lookalike,
    check_seat,
    clean_name,
    clean_text,
    person_id,
)
from mesh.rooms._replica import RoomLeaseLost, RoomOp, RoomReplica
from mesh.rooms._state import RoomState
from mesh.rooms._store import RoomStore
from registry import AgentId, Registry, StatusChange, SubscriberOverflow

if TYPE_CHECKING:
    from mesh._orchestrator.orchestrator import MeshOrchestrator

__all__ = ["RoomManager"]

log = get_logger("mesh.rooms")

P = ParamSpec("P")
T = TypeVar("T")

#: ``authorize(agent, method, principal)``: the orchestrator's door, asked ahead of a
#: room's calls (raises :class:`~mesh.Forbidden`).
Authorize = Callable[[str, str, Principal], None]


class _Room:
    """One room this manager has in memory: state, journal, observers, engine."""

    def __init__(self, state: RoomState, journal: Journal, observers: Observers) -> None:
        self.state = state
        self.journal = journal
        self.observers = observers
        self.runner: RoomRunner | None = None
        self.scope: anyio.CancelScope | None = None  # the runner's, to drop it without a record
        self.control = anyio.Lock()  # one pause / resume / stop / join at a time
        self.desk = Desk()  # the people present, and their words on the way in


class RoomManager:
    """Creates, runs, pauses, resumes, stops and shows rooms; see the module docstring.

    ``speak`` asks a member to take a turn. ``describe`` (optional) introduces a
    member the spec names only by id; without it the id is the name and the role
    is ``participant``. ``registry`` (optional) is followed for members going
    offline and coming back, and is where ``presence`` comes from unless given.
    ``authorize`` (optional) is the door a room's calls pass: asked at creation for
    each agent member on behalf of the creator, and for each person who joins.
    ``person_wait`` bounds how long a room waits for people (see :class:`RoomRunner`).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        speak: Speak,
        describe: Describe | None = None,
        registry: Registry | None = None,
        presence: Presence | None = None,
        resume: bool = True,
        fsync: bool = True,
        clock: Clock = now_ms,
        authorize: Authorize | None = None,
        person_wait: float | None = None,
    ) -> None:
        self._store = RoomStore(data_dir, fsync=fsync)
        self._authorize = authorize
        self._person_wait = person_wait
        self._speak = speak
        self._describe = describe
        self._registry = registry
        # `is not None`: a Registry has a length, and the daemon's is empty when the
        # manager is made, so `if registry` left every room blind to who is reachable.
        if presence is None and registry is not None:
            presence = registry_presence(registry)
        self._presence = presence
        self._resume = resume
        self._clock = clock
        self._rooms: dict[str, _Room] = {}
        self._reserved: set[str] = set()
        self._tasks: anyio.abc.TaskGroup | None = None
        #: Leases and a shared record of events when daemons share rooms (``mesh.cluster``
        #: sets it; the manager is then opened with ``resume=False``: the replica resumes).
        self.replica: RoomReplica | None = None

    @classmethod
    def for_orchestrator(
        cls, orchestrator: MeshOrchestrator, data_dir: str | os.PathLike[str], **kwargs: Any
    ) -> RoomManager:
        """A manager whose rooms talk to the orchestrator's agents and follow its registry."""
        kwargs.setdefault("speak", mesh_speaker(orchestrator))
        kwargs.setdefault("describe", mesh_describer(orchestrator))
        kwargs.setdefault("registry", orchestrator.registry)

        def authorize(agent: str, method: str, principal: Principal) -> None:
            orchestrator.authorize(agent, method, on_behalf_of=principal)

        kwargs.setdefault("authorize", authorize)
        return cls(data_dir, **kwargs)

    @property
    def data_dir(self) -> str:
        return str(self._store.directory)

    # -- lifetime ------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._stack: AbstractAsyncContextManager[None] = self._run()
        await self._stack.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(self._store.open)
        try:
            async with anyio.create_task_group() as tg:
                self._tasks = tg
                if self._registry is not None:
                    await tg.start(self._follow_registry, self._registry)
                if self._resume:
                    await self._resume_running()
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self._tasks = None
            for room in self._rooms.values():
                room.observers.close()
            self._rooms.clear()
            await anyio.to_thread.run_sync(self._store.close)

    async def _resume_running(self) -> None:
        for snapshot in await self._thread(self._store.snapshots, RoomStatus.RUNNING):
            room = await self._room(snapshot.id)
            log.info("room.resuming", room=snapshot.id, next_turn=room.state.current_turn + 1)
            await room.journal.emit(
                ResumedEvent(room_id=snapshot.id, next_turn=room.state.current_turn + 1)
            )
            self._start(room)

    # -- the API -------------------------------------------------------------------------

    async def create(
        self, spec: RoomSpec, *, owner: str | None = None, creator: Principal | None = None
    ) -> RoomSnapshot:
        """Create a room and start it; returns once its ``WELCOME`` is recorded.

        Raises :class:`InvalidRoomSpec` when a member cannot be reached or
        described, :class:`RoomConflict` when ``spec.id`` is taken. ``owner`` is
        recorded with the room (the daemon puts the creating token there), and so is
        ``creator``, who the room's calls are made for: a member it may not call
        raises :class:`~mesh.Forbidden` here, before anything is asked of anyone.
        """
        if self._tasks is None:
            raise RuntimeError("use the RoomManager as `async with RoomManager(...) as rooms:`")
        room_id = RoomId(spec.id or f"room-{uuid.uuid4().hex[:12]}")
        if room_id in self._reserved or await self._thread(self._store.has_room, room_id):
            raise RoomConflict(f"room {room_id!r} already exists", room=room_id)
        if self.replica is not None and not await self.replica.claim(room_id):
            raise RoomConflict(f"room {room_id!r} already exists on another daemon", room=room_id)
        self._reserved.add(room_id)
        started = False
        principal = (creator or EMBEDDER).in_room(room_id)
        try:
            self._check_members(spec, principal)
            with acting(principal):
                members = tuple([await self._member(entry) for entry in spec.members])
            limits = spec.limits
            if limits.max_turns is None:
                limits = msgspec.structs.replace(limits, max_turns=DEFAULT_MAX_TURNS[spec.mode])
            room = Room(
                id=room_id,
                topic=spec.topic,
                members=members,
                mode=spec.mode,
                policy=spec.policy,
                awareness=spec.awareness,
                limits=limits,
                rules=spec.rules,
                people=spec.people,
                created_at=self._clock(),
                owner=owner,
                creator=creator,
            )
            handle = self._handle(RoomState(room=room))
            try:
                await self._welcome(handle)
            except BaseException:
                del self._rooms[room_id]
                raise
            started = True
        finally:
            self._reserved.discard(room_id)
            if not started and self.replica is not None:
                with anyio.CancelScope(shield=True):
                    await self.replica.release(room_id)
        log.info("room.created", room=room_id, members=[m.id for m in members], mode=room.mode)
        self._start(handle)
        return handle.state.snapshot()

    def _check_members(self, spec: RoomSpec, principal: Principal) -> None:
        if self._authorize is None:
            return
        for member in spec.members:
            if isinstance(member, str) or not member.human:
                self._authorize(
                    AgentId(member) if isinstance(member, str) else member.id, ROOM_TURN, principal
                )

    async def _welcome(self, handle: _Room) -> None:
        room = handle.state.room
        await handle.journal.emit(WelcomeEvent(room_id=room.id, room=room))
        for member in room.members:
            await handle.journal.emit(
                AgentJoinedEvent(
                    room_id=room.id, agent_id=member.id, name=member.name, role=member.role
                )
            )

    async def get(self, room_id: str) -> RoomSnapshot:
        """Where the room is. Raises :class:`RoomNotFound`."""
        if room_id in self._rooms:
            return self._rooms[room_id].state.snapshot()
        snapshot = await self._thread(self._store.snapshot, room_id)
        if snapshot is None:
            raise RoomNotFound(room_id)
        return snapshot

    async def transcript(self, room_id: str) -> list[MessageEvent]:
        """The room's messages, in turn order."""
        if room_id in self._rooms:
            return list(self._rooms[room_id].state.transcript)
        await self.get(room_id)
        return await self._thread(self._store.messages, room_id)

    async def events(self, room_id: str, *, since: int = 0) -> list[RoomEvent]:
        """The room's recorded events with ``seq > since`` (from its JSONL log)."""
        await self.get(room_id)
        return await self._thread(self._store.events, room_id, since)

    async def pause(self, room_id: str) -> RoomSnapshot:
        """Pause a running room (the turn in flight is abandoned and asked again on resume)."""
        return await self._halt(room_id, StopReason.PAUSED)

    async def stop(self, room_id: str) -> RoomSnapshot:
        """Stop a room for good (a no-op for a room that has already stopped)."""
        return await self._halt(room_id, StopReason.STOPPED)

    async def resume(self, room_id: str) -> RoomSnapshot:
        """Continue a paused room, or one that stopped for ``AGENT_LOST`` or ``ERROR``."""
        room = await self._room(room_id)
        async with room.control:
            state = room.state
            if room.runner is not None:
                return state.snapshot()
            if state.stop_reason is not None and not state.stop_reason.resumable:
                raise RoomConflict(
                    f"room {room_id!r} has finished ({state.stop_reason}); it cannot be resumed",
                    room=room_id,
                )
            if self.replica is not None:
                if not await self.replica.claim(room_id):
                    forwarded = await self.replica.forward(room_id, "resume")
                    return forwarded or state.snapshot()  # another daemon runs it
                await self._refresh(room)  # the claim caught the store up: so must memory
            if state.status is not RoomStatus.RUNNING:
                await room.journal.emit(
                    ResumedEvent(room_id=state.room.id, next_turn=state.current_turn + 1)
                )
            self._start(room)
            return state.snapshot()

    async def delete(self, room_id: str) -> None:
        """Remove a stopped room, its transcript and its rows; :class:`RoomConflict` if it
        is running or paused (stop it first), :class:`RoomNotFound` if there is none."""
        room = await self._room(room_id)
        async with room.control:
            if room.runner is not None or room.state.status is not RoomStatus.STOPPED:
                raise RoomConflict(
                    f"room {room_id!r} is {room.state.status}; only a stopped room can be "
                    "deleted (stop it first)",
                    room=room_id,
                )
            if self.replica is not None:
                await self.replica.delete(room_id)  # first: every daemon forgets it then
            await self._drop(room)
        log.info("room.deleted", room=room_id)

    async def _drop(self, room: _Room) -> None:
        room_id = room.state.room.id
        room.observers.close()
        if self._rooms.get(room_id) is room:
            del self._rooms[room_id]
        await self._thread(self._store.delete, room_id)

    async def delete_finished(self, older_than_ms: int) -> list[str]:
        """Delete every stopped room last changed more than ``older_than_ms`` ago."""
        cutoff = self._clock() - older_than_ms
        deleted: list[str] = []
        for snapshot in await self.list(RoomStatus.STOPPED):
            if snapshot.updated_at < cutoff:
                with contextlib.suppress(RoomConflict, RoomNotFound):
                    await self.delete(snapshot.id)
                    deleted.append(snapshot.id)
        return deleted

    async def active_count(self) -> int:
        """Rooms running or paused (those that hold, or may again hold, an engine)."""
        return await self._thread(self._store.count, RoomStatus.RUNNING, RoomStatus.PAUSED)

    async def wait(self, room_id: str) -> RoomSnapshot:
        """Wait until the room is no longer taking turns (paused or stopped)."""
        room = await self._room(room_id)
        while room.runner is not None:
            await room.runner.done.wait()
        return room.state.snapshot()

    @asynccontextmanager
    async def subscribe(
        self, room_id: str, *, since: int = 0, max_buffer: int = DEFAULT_OBSERVER_BUFFER
    ) -> AsyncIterator[RoomEvents[RoomEvent]]:
        """``async with rooms.subscribe(id) as events: async for event in events: ...``

        Yields the recorded events after ``since``, then live ones, each once and
        in ``seq`` order; see :mod:`mesh.rooms._observers` for when it ends.
        """
        async with self._observe(room_id, since, max_buffer, deltas=False) as events:
            yield cast(RoomEvents[RoomEvent], events)

    @asynccontextmanager
    async def subscribe_live(
        self, room_id: str, *, since: int = 0, max_buffer: int = DEFAULT_OBSERVER_BUFFER
    ) -> AsyncIterator[RoomEvents[LiveEvent]]:
        """:meth:`subscribe`, plus the ``DELTA`` pieces of replies as they are written."""
        async with self._observe(room_id, since, max_buffer, deltas=True) as events:
            yield events

    @asynccontextmanager
    async def _observe(
        self, room_id: str, since: int, max_buffer: int, *, deltas: bool
    ) -> AsyncIterator[RoomEvents[LiveEvent]]:
        room = await self._room(room_id)
        events = room.observers.attach(since=since, max_buffer=max_buffer, deltas=deltas)
        try:
            events.add_history(await self._thread(self._store.events, room_id, since))
            opening = room.runner.opening() if deltas and room.runner is not None else None
            if opening is not None:
                events.add_opening(opening)  # whose turn it is, for a page opened mid-turn
            yield events
        finally:
            room.observers.detach(events)
            self._forget_if_idle(room)

    # -- for the replica (rooms shared between daemons) ----------------------------------

    async def absorb(self, event: RoomEvent, *, ours: bool = False) -> None:
        """Store an event from the shared record, and show others' to this daemon's observers.

        ``ours``: this daemon recorded it (its journal has applied it already).
        """
        try:
            await self._thread(self._store.append, event)
        except ValueError as exc:  # a gap: the stream and this store disagree
            log.error("room.absorb_failed", room=event.room_id, seq=event.seq, error=str(exc))
            return
        room = self._rooms.get(event.room_id)
        if ours or room is None or room.runner is not None:
            return
        if event.seq == room.state.last_seq + 1:
            room.state.apply(event)
            room.observers.publish(event)
        else:
            await self._refresh(room)

    async def take_over(self, room_id: str) -> bool:
        """Resume a running room whose lease this daemon now holds; False if it is not running."""
        room = await self._room(room_id)
        async with room.control:
            if room.runner is not None:
                return True
            await self._refresh(room)
            state = room.state
            if state.status is not RoomStatus.RUNNING:
                return False
            log.info("room.taking_over", room=room_id, next_turn=state.current_turn + 1)
            await room.journal.emit(
                ResumedEvent(room_id=state.room.id, next_turn=state.current_turn + 1)
            )
            self._start(room)
            return True

    async def forget(self, room_id: str) -> None:
        """Drop a room another daemon deleted from the shared record: rows, log, observers."""
        room = self._rooms.get(room_id)
        if room is None:
            await self._thread(self._store.delete, room_id)
        else:
            async with room.control:
                if room.scope is not None:
                    room.scope.cancel()
                await self._drop(room)
        log.info("room.forgotten", room=room_id)

    def relinquish(self, room_id: str) -> None:
        """Stop running the room here without recording anything (its lease went elsewhere)."""
        room = self._rooms.get(room_id)
        if room is not None and room.scope is not None:
            room.scope.cancel()

    def running_here(self) -> list[str]:
        """The rooms whose engine runs in this manager."""
        return [room_id for room_id, room in self._rooms.items() if room.runner is not None]

    async def _refresh(self, room: _Room) -> None:
        """Apply to the room in memory what the store has that it lacks (others' events)."""
        state = room.state
        for event in await self._thread(self._store.events, state.room.id, state.last_seq):
            if event.seq == state.last_seq + 1:
                state.apply(event)
                room.observers.publish(event)

    # -- people --------------------------------------------------------------------------

    async def join(
        self,
        room_id: str,
        name: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
    ) -> Member:
        """A person takes part as ``name``: a new seat (a member of kind ``human``), or
        theirs again. Their id is the name's slug. Raises :class:`RoomConflict` for a
        review or a stopped room, a name an agent of the room holds, or a full room.
        ``holder`` (a daemon identity) is checked against the room's ``people.join``
        and then holds the seat for good: no other holder may join, speak or leave
        as them (None: no check, for admins and embedders). ``person`` (their token)
        must pass the door for every agent of the room: their words reach them all.
        A name that passes for a member's is refused."""
        name = _checked(clean_name, name)
        seat_id = AgentId(person_id(name))
        room = await self._room(room_id)
        check_join(room.state.room, holder, person.name if person is not None else None)
        check_lookalike(room.state.room, seat_id, name)
        return await self._take_seat(room, seat_id, name, holder, person)

    async def _take_seat(
        self,
        room: _Room,
        member_id: AgentId,
        name: str,
        holder: str | None,
        person: Principal | None = None,
    ) -> Member:
        room_id = room.state.room.id
        check_seat(room_id, member_id, room.state.holders.get(member_id), holder)
        self._check_person(room.state.room, person)
        async with room.control:
            state = room.state
            if state.room.mode == "review":
                raise RoomConflict(
                    "a review is between two agents; people join chats", room=room_id
                )
            if state.status is RoomStatus.STOPPED:
                raise RoomConflict(
                    f"room {room_id!r} has stopped ({state.stop_reason})", room=room_id
                )
            seat = next((m for m in state.room.members if m.id == member_id), None)
            if seat is not None and not seat.human:
                raise RoomConflict(
                    f"{member_id!r} is an agent of room {room_id!r}: join under another name",
                    room=room_id,
                )
            if seat is None:
                people = sum(m.human for m in state.room.members)
                if people >= state.room.people.max_people:
                    raise RoomConflict(
                        f"room {room_id!r} is full: {people} people of "
                        f"{state.room.people.max_people}",
                        room=room_id,
                    )
                seat = Member(id=member_id, name=name, role="person", kind="human")
            if not room.desk.arrive(seat.id, holder):
                return seat  # already here (a second tab, a reconnect)
            new = seat if all(m.id != seat.id for m in state.room.members) else None
            await room.journal.emit(
                AgentJoinedEvent(
                    room_id=state.room.id,
                    agent_id=seat.id,
                    name=seat.name,
                    role=seat.role,
                    member=new,
                    holder=holder,
                    by=person.name if person is not None else None,
                )
            )
            log.info("room.person_joined", room=room_id, member=seat.id, new=new is not None)
            return seat

    async def leave(self, room_id: str, member_id: str, *, holder: str | None = None) -> None:
        """A person leaves (their turns are passed over until they join again)."""
        room = await self._room(room_id)
        member = self._person(room, member_id)
        check_seat(room_id, member.id, room.state.holders.get(member.id), holder)
        room.desk.check_holder(member.id, holder)
        async with room.control:
            if room.desk.depart(member.id):
                await room.journal.emit(
                    AgentLeftEvent(
                        room_id=room.state.room.id,
                        agent_id=member.id,
                        name=member.name,
                        role=member.role,
                        reason="left",
                    )
                )

    async def say(
        self,
        room_id: str,
        member_id: str,
        text: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
    ) -> dict[str, Any]:
        """A person's message: the answer to their turn, or an interjection between turns.

        Returns ``{"status": "turn" | "queued", "turn": N}`` (the turn it will be
        recorded at, as far as can be known now). A person who was away is joined
        again first. Raises :class:`RoomConflict` when the room is not running.
        """
        text = _checked(clean_text, text)
        room = await self._room(room_id)
        member = self._person(room, member_id)
        if room.runner is None:
            raise RoomConflict(
                f"room {room_id!r} is {room.state.status}: messages are taken while it runs",
                room=room_id,
            )
        check_seat(room_id, member.id, room.state.holders.get(member.id), holder)
        room.desk.check_holder(member.id, holder)
        if member.id not in room.desk.present:  # back: present again, and checked again
            check_join(room.state.room, holder, person.name if person is not None else None)
            await self._take_seat(room, member.id, member.name, holder, person)
        awaited = room.desk.awaiting()
        status = room.desk.offer(member.id, text, interject=room.state.room.people.interject)
        turn = awaited[1] if status == "turn" and awaited else room.state.current_turn + 1
        return {"status": status, "turn": turn, "member": member.id}

    def _check_person(self, room: Room, person: Principal | None) -> None:
        """A person's words reach every agent of the room: their token must pass the door."""
        if self._authorize is None or person is None:
            return
        for member in room.members:
            if not member.human:
                self._authorize(member.id, ROOM_TURN, person.in_room(room.id))

    @staticmethod
    def _person(room: _Room, member_id: str) -> Member:
        try:
            member = room.state.room.member(member_id)
        except KeyError:
            member = None
        if member is None or not member.human:
            raise InvalidRoomSpec(
                f"{member_id!r} is not a person in room {room.state.room.id!r}: join first",
                room=room.state.room.id,
            )
        return member

    # -- internals -----------------------------------------------------------------------

    async def _halt(self, room_id: str, reason: StopReason) -> RoomSnapshot:
        room = await self._room(room_id)
        async with room.control:
            state = room.state
            if room.runner is not None:
                room.runner.request_stop(reason)
                await room.runner.done.wait()
                return state.snapshot()
            op: RoomOp = "pause" if reason is StopReason.PAUSED else "stop"
            if self.replica is not None:
                forwarded = await self.replica.forward(room_id, op)
                if forwarded is not None:
                    return forwarded  # the daemon that runs it did it
            if reason is StopReason.PAUSED and state.status is RoomStatus.STOPPED:
                raise RoomConflict(
                    f"room {room_id!r} has stopped ({state.stop_reason}); "
                    "only a running room can be paused",
                    room=room_id,
                )
            paused_again = reason is StopReason.PAUSED and state.status is RoomStatus.PAUSED
            if not paused_again and state.status is not RoomStatus.STOPPED:
                await room.journal.emit(
                    StoppedEvent(
                        room_id=state.room.id,
                        reason=reason,
                        turn=state.current_turn,
                        detail=f"{reason.name.lower()} on request",
                    )
                )
            return state.snapshot()

    async def _member(self, entry: str | Member) -> Member:
        member = Member(id=AgentId(entry)) if isinstance(entry, str) else entry
        if member.human:
            name = _checked(clean_name, member.name or member.id)
            return Member(id=member.id, name=name, role=member.role or "person", kind="human")
        if self._presence is not None and not self._presence(member.id):
            raise InvalidRoomSpec(f"member {member.id!r} is not online", agent=member.id)
        described = Member(id=member.id)
        if self._describe is not None and not (member.name and member.role):
            try:
                described = await self._describe(member.id)
            except InvalidRoomSpec:
                raise
            except MeshError as exc:
                raise InvalidRoomSpec(f"member {member.id!r}: {exc}", agent=member.id) from exc
        return Member(
            id=member.id,
            name=member.name or described.name or member.id,
            role=member.role or described.role or "participant",
            awareness=member.awareness or described.awareness,
        )

    def _handle(self, state: RoomState) -> _Room:
        observers = Observers(state.room.id)

        async def record(event: RoomEvent) -> None:
            if self.replica is not None:
                await self.replica.record(event)  # first: it decides who recorded turn n
            await self._thread(self._store.append, event)

        journal = Journal(
            state, record, observers.publish, clock=self._clock, publish_live=observers.publish_live
        )
        room = self._rooms[state.room.id] = _Room(state, journal, observers)
        return room

    async def _room(self, room_id: str) -> _Room:
        """The room in memory, loaded from the store if need be."""
        if room_id not in self._rooms:
            state = await self._thread(self._store.load, room_id)
            if state is None:
                raise RoomNotFound(room_id)
            if room_id not in self._rooms:  # another task may have loaded it meanwhile
                self._handle(state)
        return self._rooms[room_id]

    def _start(self, room: _Room) -> None:
        if self._tasks is None:
            raise RuntimeError("use the RoomManager as `async with RoomManager(...) as rooms:`")
        runner = room.runner = RoomRunner(
            room.journal,
            self._speak,
            presence=self._presence,
            people=room.desk,
            person_wait=self._person_wait,
        )
        room.scope = anyio.CancelScope()
        self._tasks.start_soon(self._run_room, room, runner, room.scope)

    async def _run_room(self, room: _Room, runner: RoomRunner, scope: anyio.CancelScope) -> None:
        room_id = room.state.room.id
        finished = False
        try:
            with scope:
                await runner.run()
                finished = True
        except RoomLeaseLost as exc:
            log.info("room.taken_over", room=room_id, detail=str(exc))
            if self.replica is not None:  # if the lease is still ours, let whoever is right take it
                await self.replica.release(room_id)
        except Exception:
            # A broken store (disk full, say) stops this room's engine, not the daemon;
            # the room stays "running" in the store and is resumed by the next start.
            log.exception("room.engine_failed", room=room_id)
        finally:
            if room.runner is runner:
                room.runner = None
                room.scope = None
            self._forget_if_idle(room)
        if finished and self.replica is not None:
            await self.replica.release(room_id)  # stopped or paused here: anyone may resume it

    def _forget_if_idle(self, room: _Room) -> None:
        # A room nobody runs or watches is dropped from memory (the store has it
        # all), so a long-lived daemon holds only its live rooms' transcripts.
        room_id = room.state.room.id
        busy = room.runner is not None or len(room.observers) or room.control.locked()
        if busy or room.state.status is RoomStatus.RUNNING:
            return
        if self._rooms.get(room_id) is room:
            del self._rooms[room_id]

    async def _follow_registry(
        self, registry: Registry, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        started = False
        while True:
            try:
                async with registry.subscribe() as changes:
                    if not started:
                        started = True
                        task_status.started()
                    await self._resync_presence()
                    async for change in changes:
                        await self._on_change(change)
            except SubscriberOverflow:
                log.warning("room.registry_overflow")  # resubscribe, then resync everyone

    async def _on_change(self, change: StatusChange) -> None:
        online = change.new in PRESENT
        for room in list(self._rooms.values()):
            runner = room.runner
            if runner is not None and change.agent_id in {m.id for m in room.state.room.members}:
                await runner.set_presence(change.agent_id, online, str(change.kind))

    async def _resync_presence(self) -> None:
        if self._presence is None:
            return
        for room in list(self._rooms.values()):
            if room.runner is not None:
                for member in room.state.room.members:
                    await room.runner.set_presence(member.id, self._presence(member.id))

    # Last, because inside the class body the name shadows the builtin for mypy.
    async def list(self, status: RoomStatus | None = None) -> list[RoomSnapshot]:
        """Every room (or those with ``status``), oldest first."""
        return await self._thread(self._store.snapshots, status)

    @staticmethod
    async def _thread(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        return await anyio.to_thread.run_sync(lambda: function(*args, **kwargs))


def _checked(clean: Callable[[str], str], value: str) -> str:
    """``clean(value)``, its ``ValueError`` as the room error the API reports (400)."""
    try:
        return clean(value)
    except ValueError as exc:
        raise InvalidRoomSpec(str(exc)) from None
