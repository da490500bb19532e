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

The manager is the one face of collaborators with one job each, over a
:class:`~mesh.rooms._manager._table.RoomTable` (the rooms in memory and the store):
:class:`~mesh.rooms._manager._catalog.Catalog` (create, read, delete, watch),
:class:`~mesh.rooms._manager._engines.Engines` (each room's engine),
:class:`~mesh.rooms._manager._seats.Seats` (people),
:class:`~mesh.rooms._manager._replica_port.ReplicaPort` (rooms shared between
daemons) and :class:`~mesh.rooms._manager._following.RegistryFollower`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Self, cast

import anyio
import anyio.to_thread

from mesh._orchestrator.access import Principal
from mesh._tasks import open_task_group
from mesh.protocol import now_ms
from mesh.rooms._engine import Clock, Presence, Speak
from mesh.rooms._events import DeltaEvent, LiveEvent, MessageEvent, RoomEvent
from mesh.rooms._manager._catalog import Catalog
from mesh.rooms._manager._engines import Engines
from mesh.rooms._manager._following import RegistryFollower
from mesh.rooms._manager._replica_port import ReplicaPort
from mesh.rooms._manager._seats import Seats
from mesh.rooms._manager._table import Authorize, RoomTable
from mesh.rooms._mesh import Describe, mesh_describer, mesh_speaker, registry_presence
from mesh.rooms._model import Member, Room, RoomSnapshot, RoomSpec, RoomStatus, StopReason
from mesh.rooms._observers import DEFAULT_OBSERVER_BUFFER, RoomEvents
from mesh.rooms._replica import RoomReplica, qualified
from mesh.rooms._store import RoomStore
from registry import Registry

if TYPE_CHECKING:
    from mesh._orchestrator.orchestrator import MeshOrchestrator

__all__ = ["RoomManager"]


class RoomManager:
    """Creates, runs, pauses, resumes, stops and shows rooms; see the module docstring.

    ``speak`` asks a member to take a turn. ``describe`` (optional) introduces a
    member the spec names only by id; without it the id is the name and the role
    is ``participant``. ``registry`` (optional) is followed for members going
    offline and coming back, and is where ``presence`` comes from unless given.
    ``authorize`` (optional) is the door a room's calls pass: asked at creation for
    each agent member on behalf of the creator, and for each person who joins.
    ``person_wait`` bounds how long a room waits for people (see
    :class:`~mesh.rooms._engine.RoomRunner`). ``creator`` is who the rooms created
    without one are made for: None, nobody (the door refuses their calls); pass
    :data:`mesh.EMBEDDER` for your own program's rooms.
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
        creator: Principal | None = None,
    ) -> None:
        self._table = RoomTable(RoomStore(data_dir, fsync=fsync), clock)
        self._registry = registry
        # `is not None`: a Registry has a length, and the daemon's is empty when the
        # manager is made, so `if registry` left every room blind to who is reachable.
        if presence is None and registry is not None:
            presence = registry_presence(registry)
        self._resume = resume
        self._engines = Engines(self._table, speak, presence, person_wait)
        self._catalog = Catalog(
            self._table, self._engines, describe, presence, registry, authorize, creator
        )
        self._seats = Seats(self._table, authorize)
        self._port = ReplicaPort(self._table, self._engines)
        self._follower = RegistryFollower(self._table, presence)

    @classmethod
    def for_orchestrator(
        cls, orchestrator: MeshOrchestrator, data_dir: str | os.PathLike[str], **kwargs: Any
    ) -> RoomManager:
        """A manager whose rooms talk to the orchestrator's agents and follow its registry.

        The rooms hold the orchestrator's door, never its links: each turn is a call
        made through it, for the room's creator."""
        door = orchestrator.door
        kwargs.setdefault("speak", mesh_speaker(door))
        kwargs.setdefault("describe", mesh_describer(door))
        kwargs.setdefault("registry", door.registry)

        def authorize(
            agent: str, method: str, principal: Principal, timeout: float | None = None
        ) -> None:
            door.authorize(agent, method, on_behalf_of=principal, timeout=timeout)

        kwargs.setdefault("authorize", authorize)
        return cls(data_dir, **kwargs)

    @property
    def data_dir(self) -> str:
        return str(self._table.store.directory)

    @property
    def replica(self) -> RoomReplica | None:
        """Leases and a shared record of events when daemons share rooms (``mesh.cluster``
        sets it; the manager is then opened with ``resume=False``: the replica resumes)."""
        return self._table.replica

    @replica.setter
    def replica(self, replica: RoomReplica | None) -> None:
        self._table.replica = replica

    # -- lifetime ------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._stack: AbstractAsyncContextManager[None] = self._run()
        await self._stack.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[None]:
        store = self._table.store
        await anyio.to_thread.run_sync(store.open)
        try:
            async with open_task_group() as tg:
                self._engines.tasks = tg
                if self._registry is not None:
                    await tg.start(self._follower.follow, self._registry)
                if self._resume:
                    await self._engines.resume_running()
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self._engines.tasks = None
            self._table.close()
            await anyio.to_thread.run_sync(store.close)

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
        owner = self.owner_key(owner)
        return await self._catalog.create(spec, owner=owner, creator=creator)

    async def get(self, room_id: str) -> RoomSnapshot:
        """Where the room is. Raises :class:`RoomNotFound`."""
        return await self._catalog.get(room_id)

    async def transcript(self, room_id: str) -> list[MessageEvent]:
        """The room's messages, in turn order."""
        return await self._catalog.transcript(room_id)

    async def events(self, room_id: str, *, since: int = 0) -> list[RoomEvent]:
        """The room's recorded events with ``seq > since`` (from its JSONL log)."""
        return await self._catalog.events(room_id, since=since)

    async def pause(
        self,
        room_id: str,
        *,
        forward: bool = True,
        by: str | None = None,
        person: Principal | None = None,
    ) -> RoomSnapshot:
        """Pause a running room (the turn in flight is abandoned and asked again on resume).

        ``forward`` (with a replica): a room another daemon runs is paused there, since
        only its holder records; the daemon asked by another passes False, so an
        operation is never forwarded twice. So for every operation that takes it.
        ``by`` (the identity asking, checked here as its owner or an admin) and
        ``person`` (its token) go with it, and that daemon checks them again.
        """
        by = self.owner_key(by)
        return await self._engines.halt(
            room_id, StopReason.PAUSED, forward=forward, by=by, person=person
        )

    async def stop(
        self,
        room_id: str,
        *,
        forward: bool = True,
        by: str | None = None,
        person: Principal | None = None,
    ) -> RoomSnapshot:
        """Stop a room for good (a no-op for a room that has already stopped)."""
        by = self.owner_key(by)
        return await self._engines.halt(
            room_id, StopReason.STOPPED, forward=forward, by=by, person=person
        )

    async def resume(
        self,
        room_id: str,
        *,
        forward: bool = True,
        by: str | None = None,
        person: Principal | None = None,
    ) -> RoomSnapshot:
        """Continue a paused room, or one that stopped for ``AGENT_LOST`` or ``ERROR``."""
        by = self.owner_key(by)
        return await self._engines.resume(room_id, forward=forward, by=by, person=person)

    def owner_key(self, owner: str | None) -> str | None:
        """``owner`` as rooms record it: in a cluster, qualified by this daemon, whose
        token it is (``token:ID@daemon``), so the room stays its owner's wherever it runs."""
        replica = self._table.replica
        return qualified(owner, replica.daemon if replica is not None else None)

    def owned_by(self, room: Room, owner: str | None) -> bool:
        """Whether ``owner`` (a token of this daemon) owns ``room``."""
        return owner is not None and room.owner in (owner, self.owner_key(owner))

    async def delete(self, room_id: str) -> None:
        """Remove a stopped room, its transcript and its rows; :class:`RoomConflict` if it
        is running or paused (stop it first), :class:`RoomNotFound` if there is none."""
        await self._catalog.delete(room_id)

    async def delete_finished(self, older_than_ms: int) -> list[str]:
        """Delete every stopped room last changed more than ``older_than_ms`` ago."""
        return await self._catalog.delete_finished(older_than_ms)

    async def active_count(self) -> int:
        """Rooms running or paused (those that hold, or may again hold, an engine)."""
        return await self._catalog.active_count()

    async def wait(self, room_id: str) -> RoomSnapshot:
        """Wait until the room is no longer taking turns (paused or stopped)."""
        return await self._engines.wait(room_id)

    @asynccontextmanager
    async def subscribe(
        self, room_id: str, *, since: int = 0, max_buffer: int = DEFAULT_OBSERVER_BUFFER
    ) -> AsyncIterator[RoomEvents[RoomEvent]]:
        """``async with rooms.subscribe(id) as events: async for event in events: ...``

        Yields the recorded events after ``since``, then live ones, each once and
        in ``seq`` order; see :mod:`mesh.rooms._observers` for when it ends.
        """
        async with self._catalog.observe(room_id, since, max_buffer, deltas=False) as events:
            yield cast(RoomEvents[RoomEvent], events)

    @asynccontextmanager
    async def subscribe_live(
        self, room_id: str, *, since: int = 0, max_buffer: int = DEFAULT_OBSERVER_BUFFER
    ) -> AsyncIterator[RoomEvents[LiveEvent]]:
        """:meth:`subscribe`, plus the ``DELTA`` pieces of replies as they are written."""
        async with self._catalog.observe(room_id, since, max_buffer, deltas=True) as events:
            yield events

    # -- for the replica (rooms shared between daemons) ----------------------------------

    async def absorb(self, event: RoomEvent, *, ours: bool = False) -> None:
        """Store an event from the shared record, and show others' to this daemon's observers.

        ``ours``: this daemon recorded it (its journal has applied it already).
        """
        await self._port.absorb(event, ours=ours)

    def watched_live(self, room_id: str) -> bool:
        """Whether an observer here asked for the pieces of ``room_id``, run elsewhere."""
        return self._port.watched_live(room_id)

    def show_live(self, event: DeltaEvent) -> None:
        """Show a piece of a reply another daemon's room is writing to the observers here
        that asked for them (in order with the events this daemon reads)."""
        self._port.show_live(event)

    async def take_over(self, room_id: str) -> bool:
        """Resume a running room whose lease this daemon now holds; False if it is not running."""
        return await self._port.take_over(room_id)

    async def forget(self, room_id: str) -> None:
        """Drop a room another daemon deleted from the shared record: rows, log, observers."""
        await self._port.forget(room_id)

    def relinquish(self, room_id: str) -> None:
        """Stop running the room here without recording anything (its lease went elsewhere)."""
        self._engines.relinquish(room_id)

    def running_here(self) -> list[str]:
        """The rooms whose engine runs in this manager."""
        return self._engines.running_here()

    # -- people --------------------------------------------------------------------------

    async def join(
        self,
        room_id: str,
        name: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> Member:
        """A person takes part as ``name``: a new seat (a member of kind ``human``), or
        theirs again. Their id is the name's slug. Raises :class:`RoomConflict` for a
        review or a stopped room, a name an agent of the room holds, or a full room.
        ``holder`` (a daemon identity, admins' included) is checked against the room's
        ``people.join`` and then holds the seat for good: no other holder may join,
        speak or leave as them (None: the embedding program, which holds nothing).
        ``person`` (their token) must pass the door for every agent of the room: their
        words reach them all; an admin ``person`` may act for any seat.
        A name that passes for a member's is refused. A room another daemon runs is
        joined there, once checked here (``forward``: see :meth:`pause`)."""
        return await self._seats.join(room_id, name, holder=holder, person=person, forward=forward)

    async def leave(
        self,
        room_id: str,
        member_id: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> None:
        """A person leaves (their turns are passed over until they join again)."""
        await self._seats.leave(room_id, member_id, holder=holder, person=person, forward=forward)

    async def say(
        self,
        room_id: str,
        member_id: str,
        text: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> dict[str, Any]:
        """A person's message: the answer to their turn, or an interjection between turns.

        Returns ``{"status": "turn" | "queued", "turn": N}`` (the turn it will be
        recorded at, as far as can be known now). A person who was away is joined
        again first. Raises :class:`RoomConflict` when the room is not running.
        """
        return await self._seats.say(
            room_id, member_id, text, holder=holder, person=person, forward=forward
        )

    async def answer(
        self,
        room_id: str,
        member_id: str,
        question: str,
        action: str,
        content: dict[str, Any] | None = None,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> dict[str, Any]:
        """A person's answer to the question a member put to the room's people:
        ``action`` ``accept`` (with ``content`` fitting the question's schema),
        ``decline`` or ``cancel``. Returns ``{"status": "answered", "question": ID}``.

        Raises :class:`RoomConflict` for a question not open (answered, withdrawn or
        never asked) or a person not present, :class:`InvalidRoomSpec` for an answer
        that does not fit the question or a member who is not a person.
        """
        return await self._seats.answer(
            room_id,
            member_id,
            question,
            action,
            content,
            holder=holder,
            person=person,
            forward=forward,
        )

    async def pass_turn(
        self,
        room_id: str,
        member_id: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> None:
        """A person passes their turn: the room goes on with the next speaker, and asks them
        again after that. :class:`RoomConflict` when it is not their turn. A room another
        daemon runs is passed there (``forward``: see :meth:`pause`)."""
        await self._seats.pass_turn(
            room_id, member_id, holder=holder, person=person, forward=forward
        )

    async def newest(
        self, limit: int, *, before: tuple[int, str] | None = None
    ) -> list[RoomSnapshot]:
        """At most ``limit`` rooms, newest first; with ``before`` (a room's ``created_at``
        and id), the page after that room's."""
        return await self._catalog.newest(limit, before)

    async def owned(self, owner: str) -> tuple[int, int]:
        """How many rooms ``owner`` keeps (finished ones included), and how many of them
        are running or paused."""
        return await self._catalog.owned(self.owner_key(owner) or owner)

    # Last, because inside the class body the name shadows the builtin for mypy.
    async def list(self, status: RoomStatus | None = None) -> list[RoomSnapshot]:
        """Every room (or those with ``status``), oldest first."""
        return await self._catalog.snapshots(status)
