"""Rooms that survive their daemon: events in a JetStream stream, one holder under a lease.

**The record.** Every event of every room goes to the rooms stream, one subject
per room. Only the daemon that holds the room's lease records there, and only
behind its *fence*: the room's last stream sequence when it claimed the lease,
advanced by its own writes alone. Each event is published with
``Nats-Expected-Last-Subject-Sequence`` set to that fence (a compare-and-set that
fails as soon as anyone else wrote after it) and carries the writer and its
*fencing token*, the lease's revision at claim time, in its headers (``Mesh-Daemon``,
``Mesh-Lease``). So turn *n* is recorded once even if two daemons both believe
they run the room: the one whose fence is stale gets
:class:`~mesh.rooms._replica.RoomLeaseLost` and stops. Each ``Nats-Msg-Id`` is
unique to its event, and a "duplicate" answer is never taken for a write. A
holder that reads, for a room it runs, an event past its fence that another
writer (or another lease) recorded has lost the room: its engine stops there,
recording nothing. Every daemon reads the whole stream in order and stores each
event in its own room store, so any daemon lists rooms, shows transcripts and
serves observers.

**The lease.** A room runs on the daemon whose id is its key in the leases
bucket, written with a per-key TTL and renewed every third of it. When a
holder dies its lease expires; every daemon watching the bucket sees the
expiry, and the one whose compare-and-set create wins catches up on the
room's events and resumes it (``RESUMED``, then the next turn). A graceful stop
hands rooms over at once: it stops its engines, then deletes its leases. A daemon
that must write to a room nobody runs (stop a paused room, seat a person in it,
delete it) takes the lease for that write and gives it back. A lease is sealed by
the daemon it names and carries the ``until`` its holder wrote; a reader takes
anything else (unsigned, signed by another, lapsed) for nobody's lease, and an
``until`` further ahead than one TTL after the value was stored counts only up to
that (see :func:`open_lease`).

**Deleting.** A stopped room is deleted by a tombstone: an empty message on the
room's subject, behind the same fence, that names the
room in its ``Mesh-Room-Deleted`` header. Every daemon that reads it drops its own
copy, and a daemon that starts later reads the room's events, then the tombstone,
and drops them (and the copy it may still have on disk). A room created again with
the same id follows the tombstone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mesh._logging import get_logger
from mesh._orchestrator.access import Principal
from mesh.cluster._errors import ClusterError
from mesh.cluster._keydir import KeyDirectory
from mesh.cluster._keys import SIGNATURE_HEADER, KeyRing, signed_bytes
from mesh.cluster._link import KvChange, NatsLink, StreamEvent, Watch
from mesh.cluster._room_control import Ask, RoomControls
from mesh.cluster._room_live import LiveReplies
from mesh.cluster._sealed import claimed, seal, unseal
from mesh.cluster._settings import Names
from mesh.cluster._wire import ENCODER, LEASE_ENTRY, LeaseEntry
from mesh.rooms import (
    DeltaEvent,
    RoomConflict,
    RoomError,
    RoomEvent,
    RoomManager,
    RoomSnapshot,
    RoomStatus,
    WelcomeEvent,
    decode_event,
    encode_event,
)
from mesh.rooms._replica import Forwarded, PersonOp, RoomLeaseLost, RoomOp

__all__ = ["RoomReplication", "open_lease"]

log = get_logger("mesh.cluster")

#: The header that names the daemon that recorded an event.
WRITER: Final = "Mesh-Daemon"
#: The header that carries the writer's fencing token (its lease's revision at claim time).
LEASE: Final = "Mesh-Lease"
#: The header of a room's tombstone: the room it deletes.
DELETED: Final = "Mesh-Room-Deleted"
#: The header with the writer's signature of the event (see :func:`_event_bytes`).
SIGNATURE: Final = SIGNATURE_HEADER
#: How far the daemons' clocks may disagree: a lease is taken as lapsed only this
#: long after the ``until`` its holder wrote in it (itself capped at a TTL and this
#: much after the value was stored).
CLOCK_SKEW: Final = 30.0
#: Catching up on a room's events before taking it over is bounded.
CATCH_UP_TIMEOUT: Final = 10.0


@dataclass(slots=True)
class _Lease:
    """A room this daemon holds: the lease, and the fence its writes go behind."""

    revision: int  # the lease's current revision (each renewal makes a new one)
    token: int  # its revision when claimed: the fencing token every write carries
    fence: int | None = None  # the room's last stream sequence: at claim, then ours
    last_seq: int = 0  # the seq of the room event there (0: none, or a tombstone)


class RoomReplication:
    """The cluster's :class:`~mesh.rooms._replica.RoomReplica`; see the module docstring."""

    def __init__(
        self,
        link: NatsLink,
        names: Names,
        rooms: RoomManager,
        lease_ttl: float,
        keys: KeyDirectory,
        ask: Ask,
    ) -> None:
        self._link = link
        #: Leases and events are signed with our key; others' are taken only with their
        #: writer's signature.
        self._keys = keys
        self._names = names
        self._rooms = rooms
        self._ttl = lease_ttl
        self._held: dict[str, _Lease] = {}
        self._tombstones: dict[str, int] = {}  # deleted room -> sequence of its tombstone
        self._last_seq: dict[str, int] = {}  # room -> seq of its last event (signed, if signing)
        self._lapses: dict[str, float] = {}  # room another holds -> when its lease lapses
        self._holders: dict[str, str] = {}  # room another holds -> that daemon (its live lease)
        self._consumed = 0  # the stream's sequence absorbed so far
        self._progress = anyio.Event()
        self._inbox: MemoryObjectSendStream[StreamEvent]
        self._outbox: MemoryObjectReceiveStream[StreamEvent]
        self._inbox, self._outbox = anyio.create_memory_object_stream[StreamEvent](1 << 16)
        self._watches: list[Watch] = []
        self._tasks: anyio.abc.TaskGroup | None = None
        self._controls = RoomControls(names, rooms, self._holder, ask)
        #: What answers another daemon's room control (the cluster's calls serve it).
        self.answer_control = self._controls.answer
        self._live = LiveReplies(link, names, rooms, self._seen_holder, keys)
        rooms.replica = self

    # -- running -------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg, self._inbox, self._outbox:
            self._tasks = tg
            tg.start_soon(self._absorb_loop)
            tg.start_soon(self._renew_loop)
            await tg.start(self._live.run)
            task_status.started()
            await anyio.sleep_forever()

    async def on_connected(self) -> None:
        """Set up, follow the stream and the leases, and take over rooms nobody holds."""
        names, link = self._names, self._link
        await link.ensure_bucket(names.leases_bucket)
        await link.ensure_stream(names.rooms_stream, names.rooms_subjects)
        for watch in self._watches:
            await watch.stop()
        end = await link.stream_last_sequence(names.rooms_stream)
        self._watches = [
            await link.consume(
                names.rooms_stream, names.rooms_subjects, self._consumed + 1, self._on_event
            ),
            await link.watch(names.leases_bucket, self._on_lease),
        ]
        await self._live.listen()
        with anyio.fail_after(CATCH_UP_TIMEOUT):
            while self._consumed < end:
                await self._wait_progress()
        await self._renew_all()  # leases that expired while we were away are dropped first
        for snapshot in await self._rooms.list(RoomStatus.RUNNING):
            self._spawn_take_over(snapshot.id)

    def holds(self, room_id: str) -> bool:
        return room_id in self._held

    def publish_live(self, event: DeltaEvent) -> None:
        self._live.offer(event)

    def _seen_holder(self, room_id: str) -> str | None:
        """The daemon whose live lease on the room the leases watch brought last (us for
        ours): the only one whose pieces of its replies are shown here."""
        return self._names.daemon if room_id in self._held else self._holders.get(room_id)

    def held(self) -> list[str]:
        """The rooms whose lease this daemon holds, sorted."""
        return sorted(self._held)

    async def release_all(self) -> None:
        """A graceful stop: stop our engines (recording nothing), then give every lease back."""
        for room_id in list(self._held):
            self._rooms.relinquish(room_id)
        for room_id in list(self._held):
            await self.release(room_id)

    # -- the record ------------------------------------------------------------------------------

    def _on_event(self, event: StreamEvent) -> None:
        try:
            self._inbox.send_nowait(event)
        except anyio.WouldBlock:
            log.error("cluster.rooms_backlog", dropped=event.sequence)

    async def _absorb_loop(self) -> None:
        async for message in self._outbox:
            if message.sequence <= self._consumed:
                continue  # seen already (a consumer restarted after a reconnect)
            if not await self._verified(message):
                # Never applied, never shown, and never taken for our holder having lost
                # the room; but read past, or catching up on the stream would never end.
                self._consumed = message.sequence
                self._signal()
                continue
            deleted = message.headers.get(DELETED)
            if deleted is not None:
                self._check_fence(deleted, message)
                await self._absorb_tombstone(deleted, message.sequence)
                continue
            try:
                event = decode_event(message.data)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                log.error("cluster.bad_room_event", at=message.sequence, error=str(exc))
            else:
                self._check_fence(event.room_id, message)
                ours = message.headers.get(WRITER) == self._names.daemon
                self._last_seq[event.room_id] = event.seq
                await self._rooms.absorb(event, ours=ours)
            self._consumed = message.sequence
            self._signal()

    async def _verified(self, message: StreamEvent) -> bool:
        """Whether the daemon the event names as its writer signed it."""
        writer = message.headers.get(WRITER, "")
        await self._keys.ensure(writer)
        data = _event_bytes(message.subject, message.data, message.headers)
        if self._keys.keys.ring.verify(writer, data, message.headers.get(SIGNATURE)):
            return True
        log.warning("cluster.forged", claimed=writer, subject=message.subject, what="room event")
        return False

    def _check_fence(self, room_id: str, message: StreamEvent) -> None:
        """An event past our fence, for a room we run, written by another: we lost the room."""
        lease = self._held.get(room_id)
        if lease is None or lease.fence is None or message.sequence <= lease.fence:
            return
        writer, token = message.headers.get(WRITER), message.headers.get(LEASE)
        if writer == self._names.daemon and token == str(lease.token):
            return  # our own, read back before its publish returned
        log.warning("cluster.lease_lost", room=room_id, writer=writer, at=message.sequence)
        del self._held[room_id]
        self._rooms.relinquish(room_id)

    async def _absorb_tombstone(self, room_id: str, sequence: int) -> None:
        self._tombstones[room_id] = sequence
        self._last_seq.pop(room_id, None)
        try:
            await self._rooms.forget(room_id)
        except RoomError as exc:
            log.error("cluster.forget_failed", room=room_id, error=str(exc))
        self._consumed = sequence
        self._signal()

    async def wait_absorbed(self) -> None:
        """Until this daemon's store has every room event the stream holds now."""
        end = await self._link.stream_last_sequence(self._names.rooms_stream)
        with anyio.fail_after(CATCH_UP_TIMEOUT):
            while self._consumed < end:
                await self._wait_progress()

    def _signal(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    async def _wait_progress(self) -> None:
        await self._progress.wait()

    async def record(self, event: RoomEvent) -> None:
        """Publish ``event`` behind this daemon's fence; see the module docstring."""
        room = event.room_id
        lease = self._fenced(room)
        if isinstance(event, WelcomeEvent) and lease.fence != self._tombstones.get(room, 0):
            raise RoomConflict(f"room {room!r} already exists", room=room)
        if event.seq != lease.last_seq + 1:
            raise RoomLeaseLost(
                f"event {event.seq} of room {room!r} does not follow the last one recorded "
                f"({lease.last_seq})",
                room=room,
            )
        with anyio.move_on_after(self._ttl):
            while not self._link.connected:
                await self._link.wait_changed()
        if not self._link.connected:
            raise RoomLeaseLost(f"NATS was unreachable for {self._ttl:g} s", room=room)
        sequence = await self._publish(room, lease, encode_event(event), event.seq)
        if sequence is None:
            if isinstance(event, WelcomeEvent):
                raise RoomConflict(f"room {room!r} already exists", room=room)
            raise RoomLeaseLost(
                f"another daemon recorded event {event.seq} of room {room!r} first", room=room
            )
        if self._held.get(room) is lease:
            lease.fence, lease.last_seq = sequence, event.seq

    def _fenced(self, room_id: str) -> _Lease:
        """Our lease on the room, its fence set; :class:`RoomLeaseLost` if we hold none."""
        lease = self._held.get(room_id)
        if lease is None or lease.fence is None:
            raise RoomLeaseLost(
                f"this daemon does not hold room {room_id!r}: only its holder records",
                room=room_id,
            )
        return lease

    async def _publish(
        self, room_id: str, lease: _Lease, data: bytes, seq: int, **headers: str
    ) -> int | None:
        """Store ``data`` on the room's subject if nothing came after our fence."""
        assert lease.fence is not None
        daemon, subject = self._names.daemon, self._names.room_subject(room_id)
        headers = {WRITER: daemon, LEASE: str(lease.token), **headers}
        headers[SIGNATURE] = self._keys.keys.key.sign(_event_bytes(subject, data, headers))
        try:
            return await self._link.js_publish(
                subject,
                data,
                expected_last=lease.fence,
                msg_id=f"{room_id}/{seq}/{daemon}/{lease.token}",
                headers=headers,
            )
        except ClusterError as exc:
            raise RoomLeaseLost(f"could not record event {seq}: {exc}", room=room_id) from exc

    async def delete(self, room_id: str) -> None:
        """Record the room's tombstone behind our fence.

        The events before it stay in the stream (every reader drops the room at its
        tombstone): a daemon's NATS user may not purge, or one daemon's credentials
        could erase every room's record."""
        if not await self.claim(room_id):
            raise RoomConflict(f"room {room_id!r} runs on another daemon", room=room_id)
        try:
            lease = self._fenced(room_id)
            try:
                sequence = await self._publish(
                    room_id, lease, b"", lease.last_seq + 1, **{DELETED: room_id}
                )
            except RoomLeaseLost as exc:
                raise RoomConflict(f"room {room_id!r} could not be deleted: {exc}") from exc
            if sequence is None:
                raise RoomConflict(
                    f"room {room_id!r} changed on another daemon meanwhile; read it and try again",
                    room=room_id,
                )
            self._tombstones[room_id] = sequence
        finally:
            await self.release(room_id)

    # -- leases ------------------------------------------------------------------------------------

    async def claim(self, room_id: str) -> bool:
        if room_id in self._held:
            return True
        if not self._link.connected:
            raise RoomConflict(
                f"room {room_id!r}: rooms need NATS in a cluster, and {self._link.describe()}",
                room=room_id,
            )
        revision = await self._link.kv_create(
            self._names.leases_bucket, room_id, self._lease_value(room_id), ttl=self._ttl
        )
        if revision is None:
            # Ours from a previous run, or nobody's (lapsed, unsigned, forged): replaced
            # if it is still what we read.
            revision = await self._replace_lease(room_id, unless_held_by_another=True)
        if revision is None:
            return False
        lease = self._held[room_id] = _Lease(revision, revision)
        try:
            last = await self._catch_up(room_id)  # before this daemon records anything there
        except (TimeoutError, ClusterError) as exc:
            await self.release(room_id)
            raise RoomConflict(
                f"room {room_id!r}: could not catch up on its events: {exc}", room=room_id
            ) from None
        lease.fence = 0 if last is None else last.sequence
        lease.last_seq = self._last_seq.get(room_id, 0)
        return True

    async def release(self, room_id: str) -> None:
        lease = self._held.pop(room_id, None)
        if lease is None or not self._link.connected:
            return
        try:
            await self._link.kv_delete(self._names.leases_bucket, room_id, last=lease.revision)
        except ClusterError as exc:
            log.info("cluster.lease_release_failed", room=room_id, error=str(exc))

    async def lease_holder(self, room_id: str) -> str | None:
        """The daemon whose lease on ``room_id`` the leases bucket holds now, if any."""
        return await self._holder(room_id)

    async def _holder(self, room_id: str) -> str | None:
        """The daemon whose live lease, signed by it, the bucket has for the room."""
        current = await self._link.kv_entry(self._names.leases_bucket, room_id)
        if current is None or current.value is None:
            return None
        lease = await self._lease_of(room_id, current.value, current.age)
        return None if lease is None else lease.daemon

    def _lease_value(self, room_id: str) -> bytes:
        """Our lease on the room, until a TTL from now, sealed with our key."""
        daemon = self._names.daemon
        body = ENCODER.encode(LeaseEntry(daemon=daemon, until=time.time() + self._ttl))
        return seal(self._keys.keys.key, daemon, self._names.leases_bucket, room_id, body)

    async def _lease_of(self, room_id: str, value: bytes, age: float) -> LeaseEntry | None:
        """The lease in ``value`` (stored ``age`` seconds ago) if it is a live one; see
        :func:`open_lease`."""
        await self._keys.ensure(claimed(value))
        ring, bucket = self._keys.keys.ring, self._names.leases_bucket
        return open_lease(ring, bucket, room_id, value, age=age, ttl=self._ttl, now=time.time())

    async def _replace_lease(self, room_id: str, *, unless_held_by_another: bool) -> int | None:
        """Our lease in place of the room's current one if that is ours or nobody's (or
        none); the new revision, or None."""
        bucket, value = self._names.leases_bucket, self._lease_value(room_id)
        current = await self._link.kv_entry(bucket, room_id)
        if current is None or current.value is None:
            return await self._link.kv_create(bucket, room_id, value, ttl=self._ttl)
        lease = await self._lease_of(room_id, current.value, current.age)
        if lease is not None and lease.daemon != self._names.daemon and unless_held_by_another:
            return None
        last = current.revision
        return await self._link.kv_update(bucket, room_id, value, last=last, ttl=self._ttl)

    async def _renew_loop(self) -> None:
        while True:
            with anyio.move_on_after(self._ttl / 3):
                await anyio.sleep_forever()
            if self._link.connected:
                await self._renew_all()
                self._take_over_lapsed()

    async def _renew_all(self) -> None:
        bucket = self._names.leases_bucket
        for room_id, lease in list(self._held.items()):
            try:
                value = self._lease_value(room_id)
                renewed = await self._link.kv_update(
                    bucket, room_id, value, last=lease.revision, ttl=self._ttl
                )
                if renewed is None:
                    # Another value in its place: ours still, unless another daemon's own
                    # live lease is there (a forged or deleted one is replaced).
                    renewed = await self._replace_lease(room_id, unless_held_by_another=True)
            except ClusterError as exc:
                log.info("cluster.lease_renew_failed", room=room_id, error=str(exc))
                continue  # tried again in a third of the TTL
            if renewed is None:
                log.warning("cluster.lease_lost", room=room_id)
                if self._held.get(room_id) is lease:
                    del self._held[room_id]
                    self._rooms.relinquish(room_id)
            else:
                lease.revision = renewed

    def _on_lease(self, change: KvChange | None) -> None:
        if change is None or change.key in self._held:
            return
        if change.value is None:
            self._lapses.pop(change.key, None)
            self._holders.pop(change.key, None)
            self._spawn_take_over(change.key)  # its holder let go, or died
        elif self._tasks is not None:
            self._tasks.start_soon(self._seen_lease, change.key, change.value, change.age)

    async def _seen_lease(self, room_id: str, value: bytes, age: float) -> None:
        """Note when another daemon's lease lapses; a value that is nobody's lease (forged,
        unsigned, lapsed) is taken over at once unless the last real one is still live."""
        lease = await self._lease_of(room_id, value, age)
        if lease is not None:
            self._lapses[room_id] = lease.until + CLOCK_SKEW
            self._holders[room_id] = lease.daemon
            return
        self._holders.pop(room_id, None)
        if self._lapses.get(room_id, 0.0) < time.time():
            self._lapses.pop(room_id, None)
            self._spawn_take_over(room_id)

    def _take_over_lapsed(self) -> None:
        """Rooms whose holder stopped renewing while a value stayed in its place."""
        now = time.time()
        for room_id in [r for r, lapse in self._lapses.items() if lapse < now]:
            del self._lapses[room_id]
            self._holders.pop(room_id, None)
            self._spawn_take_over(room_id)

    def _spawn_take_over(self, room_id: str) -> None:
        if self._tasks is not None and room_id not in self._held:
            self._tasks.start_soon(self._take_over, room_id)

    async def _take_over(self, room_id: str) -> None:
        try:
            await self._catch_up(room_id)
            snapshot = await self._rooms.get(room_id)
            if snapshot.status is not RoomStatus.RUNNING or not await self.claim(room_id):
                return
            if not await self._rooms.take_over(room_id):
                await self.release(room_id)
        except (RoomError, ClusterError, TimeoutError) as exc:
            log.info("cluster.take_over_skipped", room=room_id, reason=str(exc))

    async def _catch_up(self, room_id: str) -> StreamEvent | None:
        """Until this daemon's store has every event the stream holds for the room; the last."""
        subject = self._names.room_subject(room_id)
        last = await self._link.last_message(self._names.rooms_stream, subject)
        if last is None:
            return None
        with anyio.fail_after(CATCH_UP_TIMEOUT):
            while self._consumed < last.sequence:
                await self._wait_progress()
        return last

    # -- operations for the daemon that runs a room -----------------------------------------------

    @property
    def daemon(self) -> str:
        return self._names.daemon

    async def forward(
        self, room_id: str, op: RoomOp, *, by: str | None = None, person: Principal | None = None
    ) -> RoomSnapshot | None:
        return await self._controls.forward(room_id, op, by=by, person=person)

    async def forward_person(
        self,
        room_id: str,
        op: PersonOp,
        args: dict[str, Any],
        person: Principal | None = None,
    ) -> Forwarded | None:
        return await self._controls.forward_person(room_id, op, args, person)


def open_lease(
    ring: KeyRing, bucket: str, room_id: str, value: bytes, *, age: float, ttl: float, now: float
) -> LeaseEntry | None:
    """The lease in ``value``, a room's entry in the leases bucket stored ``age`` seconds
    before ``now``, if it is a live one; None if it is nobody's.

    A lease is live only if signed by the daemon it names (anything else is logged
    ``cluster.forged``), and until :data:`CLOCK_SKEW` past its ``until``. Its ``until``
    counts only up to one ``ttl`` plus the skew after it was stored, which a holder's
    renewal never writes past: so one write, copied back or made up with an ``until``
    far ahead and no TTL, names its holder for at most ``ttl`` + twice the skew.
    """
    opened = unseal(ring, bucket, room_id, value)
    if opened is None:
        return None
    try:
        lease = LEASE_ENTRY.decode(opened.body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if lease.daemon != opened.daemon:
        subject = f"{bucket}/{room_id}"
        log.warning("cluster.forged", claimed=lease.daemon, subject=subject, what="lease")
        return None
    cap = now - age + ttl + CLOCK_SKEW
    if lease.until > cap:
        log.warning(
            "cluster.lease_capped", room=room_id, daemon=lease.daemon, ahead=lease.until - now
        )
        lease = msgspec.structs.replace(lease, until=cap)
    if lease.until + CLOCK_SKEW < now:
        return None
    return lease


def _event_bytes(subject: str, data: bytes, headers: dict[str, str]) -> bytes:
    """What a room event's signature covers: where it is recorded, what, under which
    lease, and the room a tombstone deletes."""
    return signed_bytes(subject, data, headers.get(LEASE, ""), headers.get(DELETED, ""))
