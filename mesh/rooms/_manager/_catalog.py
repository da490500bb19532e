"""Rooms as records: create one (its members introduced), read it, list, delete, watch.

Creating a room reserves its id (here, and with the replica when daemons share
rooms), introduces each member, records the ``WELCOME`` and the joins, and
hands the room to :class:`~mesh.rooms._manager._engines.Engines` to run.
Reading goes to the room in memory when there is one, else to the store.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import msgspec

from mesh._errors import MeshError
from mesh._logging import get_logger
from mesh._orchestrator.access import NOBODY, Principal
from mesh.rooms._engine import Presence, acting
from mesh.rooms._errors import InvalidRoomSpec, RoomConflict, RoomNotFound
from mesh.rooms._events import (
    AgentJoinedEvent,
    LiveEvent,
    MessageEvent,
    RoomEvent,
    StoppedEvent,
    WelcomeEvent,
)
from mesh.rooms._manager._engines import Engines
from mesh.rooms._manager._table import Authorize, HeldRoom, RoomTable, checked, in_thread
from mesh.rooms._mesh import ROOM_TURN, Describe
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
from mesh.rooms._observers import RoomEvents
from mesh.rooms._people import clean_name
from mesh.rooms._state import RoomState
from registry import AgentId, Registry

__all__ = ["Catalog"]

log = get_logger("mesh.rooms")


class Catalog:
    """Create, read, list, delete and watch the rooms of ``table``; see the module docstring."""

    def __init__(
        self,
        table: RoomTable,
        engines: Engines,
        describe: Describe | None,
        presence: Presence | None,
        registry: Registry | None = None,
        authorize: Authorize | None = None,
        creator: Principal | None = None,
    ) -> None:
        self._table = table
        self._authorize = authorize
        self._creator = creator
        self._engines = engines
        self._describe = describe
        self._presence = presence
        self._registry = registry  # tells an unknown id from an offline agent
        self._reserved: set[str] = set()

    async def create(
        self, spec: RoomSpec, *, owner: str | None = None, creator: Principal | None = None
    ) -> RoomSnapshot:
        if self._engines.tasks is None:
            raise RuntimeError("use the RoomManager as `async with RoomManager(...) as rooms:`")
        table = self._table
        room_id = RoomId(spec.id or f"room-{uuid.uuid4().hex[:12]}")
        if room_id in self._reserved or await in_thread(table.store.has_room, room_id):
            raise RoomConflict(f"room {room_id!r} already exists", room=room_id)
        if table.replica is not None and not await table.replica.claim(room_id):
            raise RoomConflict(f"room {room_id!r} already exists on another daemon", room=room_id)
        self._reserved.add(room_id)
        started = False
        creator = creator or self._creator
        principal = (creator or NOBODY).in_room(room_id)
        try:
            self._check_members(spec, principal)
            with acting(principal):  # introductions are the room's calls too
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
                seed=spec.seed,
                agenda=spec.agenda,
                turn_prompt=spec.turn_prompt,
                created_at=table.clock(),
                owner=owner,
                creator=creator,
            )
            # From its WELCOME on, the room is recorded as running: it must start even if
            # whoever asked for it goes away (a client that closes its socket cancels the
            # request), or the store would list it running at turn 0 for ever.
            with anyio.CancelScope(shield=True):
                handle = await self._commit(room, paused=spec.paused)
            started = True
        finally:
            self._reserved.discard(room_id)
            if not started and table.replica is not None:
                with anyio.CancelScope(shield=True):
                    await table.replica.release(room_id)
        return handle.state.snapshot()

    async def _commit(self, room: Room, *, paused: bool) -> HeldRoom:
        """Hold ``room``, record its ``WELCOME`` and joins, and start it (or record it
        paused); the caller shields this, so a room is either started or, if recording
        fails, not held at all."""
        table = self._table
        handle = table.hold(RoomState(room=room))
        try:
            await self._welcome(handle)
        except BaseException:
            del table.rooms[room.id]
            raise
        members = [m.id for m in room.members]
        log.info("room.created", room=room.id, members=members, mode=room.mode, paused=paused)
        if paused:
            await self._pause_unstarted(handle)
        else:
            self._engines.start(handle)
        return handle

    async def _pause_unstarted(self, handle: HeldRoom) -> None:
        """Record the new room paused before its first turn: the same ``STOPPED`` a pause
        at turn 0 records, so the room lists, shows and resumes like one."""
        room_id = handle.state.room.id
        reason = StopReason.PAUSED
        await handle.journal.emit(
            StoppedEvent(
                room_id=room_id, reason=reason, turn=0, detail=f"{reason.name.lower()} on request"
            )
        )
        if self._table.replica is not None:
            await self._table.replica.release(room_id)  # paused here: anyone may resume it
        self._table.forget_if_idle(handle)

    def _check_members(self, spec: RoomSpec, principal: Principal) -> None:
        """Refuse, before anyone is asked anything, a member the room may not call, or may
        not call with its turn timeout as the deadline."""
        if self._authorize is None:
            return
        timeout = spec.limits.turn_timeout
        for member in spec.members:
            if isinstance(member, str):
                self._authorize(member, ROOM_TURN, principal, timeout)
            elif not member.human:
                self._authorize(member.id, ROOM_TURN, principal, timeout)

    async def _welcome(self, handle: HeldRoom) -> None:
        room = handle.state.room
        await handle.journal.emit(WelcomeEvent(room_id=room.id, room=room))
        for member in room.members:
            await handle.journal.emit(
                AgentJoinedEvent(
                    room_id=room.id, agent_id=member.id, name=member.name, role=member.role
                )
            )

    async def _member(self, entry: str | Member) -> Member:
        member = Member(id=AgentId(entry)) if isinstance(entry, str) else entry
        if member.human:
            name = checked(clean_name, member.name or member.id)
            return Member(id=member.id, name=name, role=member.role or "person", kind="human")
        if self._presence is not None and not self._presence(member.id):
            unknown = self._registry is not None and self._registry.get(member.id) is None
            why = f": no agent {member.id!r} is registered" if unknown else " is not online"
            raise InvalidRoomSpec(f"member {member.id!r}{why}", agent=member.id)
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
            reply_tokens=member.reply_tokens,
            context_tokens=member.context_tokens or described.context_tokens,
        )

    async def get(self, room_id: str) -> RoomSnapshot:
        if room_id in self._table.rooms:
            return self._table.rooms[room_id].state.snapshot()
        snapshot = await in_thread(self._table.store.snapshot, room_id)
        if snapshot is None:
            raise RoomNotFound(room_id)
        return snapshot

    async def transcript(self, room_id: str) -> list[MessageEvent]:
        if room_id in self._table.rooms:
            return list(self._table.rooms[room_id].state.transcript)
        await self.get(room_id)
        return await in_thread(self._table.store.messages, room_id)

    async def events(self, room_id: str, *, since: int = 0) -> list[RoomEvent]:
        await self.get(room_id)
        return await in_thread(self._table.store.events, room_id, since)

    async def snapshots(self, status: RoomStatus | None = None) -> list[RoomSnapshot]:
        return await in_thread(self._table.store.snapshots, status)

    async def newest(self, limit: int, before: tuple[int, str] | None) -> list[RoomSnapshot]:
        return await in_thread(self._table.store.newest, limit, before)

    async def owned(self, owner: str) -> tuple[int, int]:
        return await in_thread(self._table.store.owned, owner)

    async def active_count(self) -> int:
        return await in_thread(self._table.store.count, RoomStatus.RUNNING, RoomStatus.PAUSED)

    async def delete(self, room_id: str) -> None:
        room = await self._table.load(room_id)
        async with room.control:
            if room.runner is not None or room.state.status is not RoomStatus.STOPPED:
                raise RoomConflict(
                    f"room {room_id!r} is {room.state.status}; only a stopped room can be "
                    "deleted (stop it first)",
                    room=room_id,
                )
            if self._table.replica is not None:
                await self._table.replica.delete(room_id)  # first: every daemon forgets it then
            await self._table.drop(room)
        log.info("room.deleted", room=room_id)

    async def delete_finished(self, older_than_ms: int) -> list[str]:
        cutoff = self._table.clock() - older_than_ms
        deleted: list[str] = []
        for snapshot in await self.snapshots(RoomStatus.STOPPED):
            if snapshot.updated_at < cutoff:
                with contextlib.suppress(RoomConflict, RoomNotFound):
                    await self.delete(snapshot.id)
                    deleted.append(snapshot.id)
        return deleted

    @asynccontextmanager
    async def observe(
        self, room_id: str, since: int, max_buffer: int, *, deltas: bool
    ) -> AsyncIterator[RoomEvents[LiveEvent]]:
        room = await self._table.load(room_id)
        events = room.observers.attach(since=since, max_buffer=max_buffer, deltas=deltas)
        try:
            events.add_history(await in_thread(self._table.store.events, room_id, since))
            opening = room.runner.opening() if deltas and room.runner is not None else None
            if opening is not None:
                events.add_opening(opening)  # whose turn it is, for a page opened mid-turn
            yield events
        finally:
            room.observers.detach(events)
            self._table.forget_if_idle(room)
