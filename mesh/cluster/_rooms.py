"""Rooms that survive their daemon: events in a JetStream stream, one holder under a lease.

**The record.** Every event of every room goes to the rooms stream, one subject
per room, published with ``Nats-Expected-Last-Subject-Sequence`` set to the
room's last event there: the compare-and-set that makes turn *n* recorded once
even if two daemons both believe they run the room (the loser gets
:class:`~mesh.rooms._replica.RoomLeaseLost` and stops). A ``Nats-Msg-Id`` of
``room/seq`` makes a retried publish a no-op. Every daemon reads the whole
stream in order and stores each event in its own room store, so any daemon
lists rooms, shows transcripts and serves observers.

**The lease.** A room runs on the daemon whose id is its key in the leases
bucket, written with a per-key TTL and renewed every third of it. When a
holder dies its lease expires; every daemon watching the bucket sees the
expiry, and the one whose compare-and-set create wins catches up on the
room's events and resumes it (``RESUMED``, then the next turn). A graceful stop
hands rooms over at once: it stops its engines, then deletes its leases.

**Deleting.** A stopped room is deleted by a tombstone: an empty message on the
room's subject, after its last event (the same compare-and-set), that names the
room in its ``Mesh-Room-Deleted`` header. Every daemon that reads it drops its own
copy; the room's events before it are then purged, so a daemon that starts later
reads only the tombstone (and drops the copy it may still have on disk). A room
created again with the same id follows the tombstone.
"""

from __future__ import annotations

from typing import Any, Final

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mesh._logging import get_logger
from mesh.cluster._errors import ClusterError
from mesh.cluster._link import KvChange, Message, NatsLink, StreamEvent, Watch
from mesh.cluster._settings import Names
from mesh.cluster._wire import (
    ENCODER,
    LEASE_ENTRY,
    ROOM_CONTROL,
    LeaseEntry,
    RoomControl,
    RoomControlReply,
)
from mesh.rooms import (
    RoomConflict,
    RoomError,
    RoomEvent,
    RoomManager,
    RoomNotFound,
    RoomSnapshot,
    RoomStatus,
    WelcomeEvent,
    decode_event,
    encode_event,
)
from mesh.rooms._replica import RoomLeaseLost, RoomOp

__all__ = ["RoomReplication"]

log = get_logger("mesh.cluster")

#: The header that names the daemon that recorded an event.
WRITER: Final = "Mesh-Daemon"
#: The header of a room's tombstone: the room it deletes.
DELETED: Final = "Mesh-Room-Deleted"
#: Catching up on a room's events before taking it over is bounded.
CATCH_UP_TIMEOUT: Final = 10.0
#: Asking the holder to pause, stop or resume a room gets this long.
CONTROL_TIMEOUT: Final = 10.0


class RoomReplication:
    """The cluster's :class:`~mesh.rooms._replica.RoomReplica`; see the module docstring."""

    def __init__(self, link: NatsLink, names: Names, rooms: RoomManager, lease_ttl: float) -> None:
        self._link = link
        self._names = names
        self._rooms = rooms
        self._ttl = lease_ttl
        self._held: dict[str, int] = {}  # room -> revision of our lease
        self._tails: dict[str, int] = {}  # room -> stream sequence of its last event here
        self._tombstones: dict[str, int] = {}  # deleted room -> sequence of its tombstone
        self._consumed = 0  # the stream's sequence absorbed so far
        self._progress = anyio.Event()
        self._inbox: MemoryObjectSendStream[StreamEvent]
        self._outbox: MemoryObjectReceiveStream[StreamEvent]
        self._inbox, self._outbox = anyio.create_memory_object_stream[StreamEvent](1 << 16)
        self._watches: list[Watch] = []
        self._control: Watch | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        rooms.replica = self

    # -- running -------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg, self._inbox, self._outbox:
            self._tasks = tg
            tg.start_soon(self._absorb_loop)
            tg.start_soon(self._renew_loop)
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
        if self._control is None:
            self._control = await link.subscribe(names.room_control(), self._on_control)
        with anyio.fail_after(CATCH_UP_TIMEOUT):
            while self._consumed < end:
                await self._wait_progress()
        await self._renew_all()  # leases that expired while we were away are dropped first
        for snapshot in await self._rooms.list(RoomStatus.RUNNING):
            self._spawn_take_over(snapshot.id)

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
            deleted = message.headers.get(DELETED)
            if deleted is not None:
                await self._absorb_tombstone(deleted, message.sequence)
                continue
            try:
                event = decode_event(message.data)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                log.error("cluster.bad_room_event", at=message.sequence, error=str(exc))
            else:
                ours = message.headers.get(WRITER) == self._names.daemon
                await self._rooms.absorb(event, ours=ours)
                room = event.room_id
                self._tails[room] = max(self._tails.get(room, 0), message.sequence)
            self._consumed = message.sequence
            self._signal()

    async def _absorb_tombstone(self, room_id: str, sequence: int) -> None:
        self._tails[room_id] = self._tombstones[room_id] = sequence
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
        """Publish ``event`` after the room's last one; see the module docstring."""
        room = event.room_id
        if isinstance(event, WelcomeEvent):
            expected = self._tombstones.get(room, 0)  # a new room, or one deleted before
        else:
            expected = self._tails.get(room, 0)
        subject = self._names.room_subject(room)
        with anyio.move_on_after(self._ttl):
            while not self._link.connected:
                await self._link.wait_changed()
        if not self._link.connected:
            raise RoomLeaseLost(f"NATS was unreachable for {self._ttl:g} s", room=room)
        try:
            sequence = await self._link.js_publish(
                subject,
                encode_event(event),
                expected_last=expected,
                msg_id=f"{room}/{event.seq}",
                headers={WRITER: self._names.daemon},
            )
        except ClusterError as exc:
            raise RoomLeaseLost(f"could not record event {event.seq}: {exc}", room=room) from exc
        if sequence is None:
            sequence = await self._recorded_by_us(event, subject)
        self._tails[room] = max(self._tails.get(room, 0), sequence)

    async def _recorded_by_us(self, event: RoomEvent, subject: str) -> int:
        """The compare-and-set lost: unless the last event there is this one of ours, give up."""
        last = await self._link.last_message(self._names.rooms_stream, subject)
        if last is not None and last.headers.get(WRITER) == self._names.daemon:
            try:
                if decode_event(last.data).seq == event.seq:
                    return last.sequence  # our own earlier attempt got through
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass
        if isinstance(event, WelcomeEvent):
            raise RoomConflict(f"room {event.room_id!r} already exists", room=event.room_id)
        raise RoomLeaseLost(
            f"another daemon recorded event {event.seq} of room {event.room_id!r} first",
            room=event.room_id,
        )

    async def delete(self, room_id: str) -> None:
        """Record the room's tombstone after its last event, then purge what came before."""
        subject, stream = self._names.room_subject(room_id), self._names.rooms_stream
        if not self._link.connected:
            raise RoomConflict(
                f"room {room_id!r}: rooms need NATS in a cluster, and {self._link.describe()}",
                room=room_id,
            )
        try:
            sequence = await self._link.js_publish(
                subject,
                b"",
                expected_last=self._tails.get(room_id, 0),
                headers={WRITER: self._names.daemon, DELETED: room_id},
            )
        except ClusterError as exc:
            why = f"room {room_id!r} could not be deleted: {exc}"
            raise RoomConflict(why, room=room_id) from exc
        if sequence is None:
            raise RoomConflict(
                f"room {room_id!r} changed on another daemon meanwhile; read it and try again",
                room=room_id,
            )
        self._tails[room_id] = self._tombstones[room_id] = sequence
        try:
            await self._link.purge(stream, subject, keep=1)
        except ClusterError as exc:  # the tombstone is what deletes; purging frees the space
            log.info("cluster.room_purge_failed", room=room_id, error=str(exc))

    # -- leases ------------------------------------------------------------------------------------

    async def claim(self, room_id: str) -> bool:
        if room_id in self._held:
            return True
        if not self._link.connected:
            raise RoomConflict(
                f"room {room_id!r}: rooms need NATS in a cluster, and {self._link.describe()}",
                room=room_id,
            )
        bucket, value = (
            self._names.leases_bucket,
            ENCODER.encode(LeaseEntry(daemon=self._names.daemon)),
        )
        revision = await self._link.kv_create(bucket, room_id, value, ttl=self._ttl)
        if revision is None and await self._holder(room_id) == self._names.daemon:
            current = await self._link.kv_get(bucket, room_id)  # ours from a previous run
            if current is not None:
                revision = await self._link.kv_update(
                    bucket, room_id, value, last=current[1], ttl=self._ttl
                )
        if revision is None:
            return False
        self._held[room_id] = revision
        try:
            await self._catch_up(room_id)  # before this daemon records anything in the room
        except TimeoutError:
            await self.release(room_id)
            raise RoomConflict(
                f"room {room_id!r}: could not catch up on its events in time", room=room_id
            ) from None
        return True

    async def release(self, room_id: str) -> None:
        revision = self._held.pop(room_id, None)
        if revision is None or not self._link.connected:
            return
        try:
            await self._link.kv_delete(self._names.leases_bucket, room_id, last=revision)
        except ClusterError as exc:
            log.info("cluster.lease_release_failed", room=room_id, error=str(exc))

    async def _holder(self, room_id: str) -> str | None:
        current = await self._link.kv_get(self._names.leases_bucket, room_id)
        if current is None:
            return None
        try:
            return LEASE_ENTRY.decode(current[0]).daemon
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None

    async def _renew_loop(self) -> None:
        while True:
            with anyio.move_on_after(self._ttl / 3):
                await anyio.sleep_forever()
            if self._link.connected:
                await self._renew_all()

    async def _renew_all(self) -> None:
        bucket, value = (
            self._names.leases_bucket,
            ENCODER.encode(LeaseEntry(daemon=self._names.daemon)),
        )
        for room_id, revision in list(self._held.items()):
            try:
                renewed = await self._link.kv_update(
                    bucket, room_id, value, last=revision, ttl=self._ttl
                )
            except ClusterError as exc:
                log.info("cluster.lease_renew_failed", room=room_id, error=str(exc))
                continue  # tried again in a third of the TTL
            if renewed is None:
                log.warning("cluster.lease_lost", room=room_id)
                self._held.pop(room_id, None)
                self._rooms.relinquish(room_id)
            else:
                self._held[room_id] = renewed

    def _on_lease(self, change: KvChange | None) -> None:
        if change is not None and change.value is None and change.key not in self._held:
            self._spawn_take_over(change.key)  # its holder let go, or died

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

    async def _catch_up(self, room_id: str) -> None:
        """Until this daemon's store has every event the stream holds for the room."""
        subject = self._names.room_subject(room_id)
        last = await self._link.last_message(self._names.rooms_stream, subject)
        if last is None:
            return
        with anyio.fail_after(CATCH_UP_TIMEOUT):
            while self._consumed < last.sequence:
                await self._wait_progress()

    # -- control from other daemons ------------------------------------------------------------

    async def forward(self, room_id: str, op: RoomOp) -> RoomSnapshot | None:
        try:
            holder = await self._holder(room_id)
            if holder is None or holder == self._names.daemon:
                return None
            request = ENCODER.encode(RoomControl(room=room_id, op=op))
            data = await self._link.request(
                self._names.room_control(holder), request, timeout=CONTROL_TIMEOUT
            )
        except ClusterError as exc:
            raise RoomConflict(
                f"room {room_id!r} runs on another daemon: {exc}", room=room_id
            ) from exc
        reply = msgspec.json.decode(data, type=RoomControlReply)
        if reply.error is not None:
            if reply.kind == "not_found":
                raise RoomNotFound(room_id)
            raise RoomConflict(reply.error, room=room_id)
        return msgspec.convert(reply.snapshot, RoomSnapshot)

    def _on_control(self, message: Message) -> None:
        if self._tasks is not None and message.reply:
            self._tasks.start_soon(self._control_one, message)

    async def _control_one(self, message: Message) -> None:
        reply: RoomControlReply
        try:
            control = ROOM_CONTROL.decode(message.data)
            snapshot = await _apply(self._rooms, control)
            reply = RoomControlReply(snapshot=msgspec.to_builtins(snapshot))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            reply = RoomControlReply(error=f"invalid room control: {exc}", kind="invalid")
        except RoomNotFound as exc:
            reply = RoomControlReply(error=str(exc), kind="not_found")
        except RoomError as exc:
            reply = RoomControlReply(error=str(exc), kind="conflict")
        try:
            await self._link.publish(message.reply, ENCODER.encode(reply))
        except ClusterError as exc:
            log.info("cluster.control_answer_lost", error=str(exc))


async def _apply(rooms: RoomManager, control: RoomControl) -> RoomSnapshot:
    operations: dict[str, Any] = {"pause": rooms.pause, "stop": rooms.stop, "resume": rooms.resume}
    snapshot: RoomSnapshot = await operations[control.op](control.room)
    return snapshot
