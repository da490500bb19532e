"""Pieces of replies being written, from the daemon that runs a room to the observers on others.

Only a room's holder runs its engine, so only it sees the pieces of a reply as
they are written (``DELTA`` events). It publishes them on its own subject,
``mesh.C.room-live.<holder>``, on core NATS: nothing is stored, and a piece
nobody listens for is gone (the ``MESSAGE`` that follows holds the whole text).
Every daemon subscribes once, to ``mesh.C.room-live.*``, and hands the pieces
of the rooms it has observers for to its manager, which shows them to the
observers that asked for deltas.

Pieces wait in a bounded queue (a full one drops them) for one sender task,
which takes whatever queued while it published the last message (up to
:data:`MAX_BATCH` pieces, or about :data:`MAX_BATCH_TEXT` characters): a reply
written slowly costs a message per piece, one written fast far fewer.

A message is signed by its publisher over its subject and body. A reader shows
a piece only if the signer is the daemon whose subject it came on and that
daemon holds the room's lease as the reader last saw it; anything else is
logged ``cluster.forged`` and dropped. A reader queues nothing of its own; the
manager holds back, boundedly, a piece that overtook the event it follows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import anyio
import anyio.abc
import msgspec

from mesh._logging import get_logger
from mesh.cluster._errors import ClusterError
from mesh.cluster._keydir import KeyDirectory
from mesh.cluster._keys import DAEMON_HEADER, forged
from mesh.cluster._link import NatsLink, NatsMessage, Watch
from mesh.cluster._settings import Names
from mesh.cluster._wire import ENCODER, LIVE_PIECES, LivePieces
from mesh.rooms import DeltaEvent, RoomManager

__all__ = ["LiveReplies"]

log = get_logger("mesh.cluster")

#: Pieces waiting to be published: several seconds of the fastest stream. A slow NATS
#: loses pieces, never holds a room's engine back.
QUEUE_SIZE: Final = 1024
#: One message carries at most this many pieces, and stops taking more once its texts
#: reach this many characters (one piece is bounded by the frame size of the agent's link).
MAX_BATCH: Final = 512
MAX_BATCH_TEXT: Final = 32 * 1024
#: After a piece, the sender waits this long for more to share its message: a fast stream
#: then costs one signature and one NATS message per batch, not per word, and a person
#: watching cannot tell 20 ms.
LINGER: Final = 0.02


class LiveReplies:
    """Publishes the pieces of our rooms' replies, and shows others' here; see the module."""

    def __init__(
        self,
        link: NatsLink,
        names: Names,
        rooms: RoomManager,
        holder_of: Callable[[str], str | None],
        keys: KeyDirectory,
    ) -> None:
        self._link = link
        self._names = names
        self._rooms = rooms
        #: The daemon whose lease on a room this daemon saw last (itself for its own).
        self._holder_of = holder_of
        self._keys = keys
        self._queue_in, self._queue = anyio.create_memory_object_stream[DeltaEvent](QUEUE_SIZE)
        self._subscription: Watch | None = None
        self.dropped = 0  # pieces the full queue refused

    # -- publishing ----------------------------------------------------------------------

    def offer(self, event: DeltaEvent) -> None:
        """Queue a piece of a reply one of our rooms is writing; never waits."""
        try:
            self._queue_in.send_nowait(event)
        except anyio.WouldBlock:
            self.dropped += 1

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Publish what :meth:`offer` queues, in batches, until cancelled."""
        async with self._queue_in, self._queue:
            task_status.started()
            async for first in self._queue:
                await anyio.sleep(LINGER)
                await self._publish(self._batch(first))

    def _batch(self, first: DeltaEvent) -> list[DeltaEvent]:
        batch, size = [first], len(first.text)
        while len(batch) < MAX_BATCH and size < MAX_BATCH_TEXT:
            try:
                piece = self._queue.receive_nowait()
            except anyio.WouldBlock:
                break
            batch.append(piece)
            size += len(piece.text)
        return batch

    async def _publish(self, batch: list[DeltaEvent]) -> None:
        if not self._link.connected:
            return  # live only: nothing to catch up on later
        subject = self._names.room_live()
        data = ENCODER.encode(LivePieces(pieces=tuple(batch)))
        try:
            await self._link.publish(subject, data, headers=self._keys.keys.headers(subject, data))
        except ClusterError as exc:
            log.info("cluster.live_pieces_lost", pieces=len(batch), error=str(exc))

    # -- reading ---------------------------------------------------------------------------

    async def listen(self) -> None:
        """Subscribe to every daemon's pieces (once: NATS keeps it across reconnects)."""
        if self._subscription is None:
            subject = self._names.room_live("*")
            self._subscription = await self._link.subscribe(subject, self._on_pieces)

    def _on_pieces(self, message: NatsMessage) -> None:
        publisher = message.subject.rpartition(".")[2]
        if publisher == self._names.daemon:
            return  # ours, shown here already
        try:
            pieces = LIVE_PIECES.decode(message.data).pieces
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.info("cluster.bad_live_pieces", subject=message.subject, error=str(exc))
            return
        watched = [piece for piece in pieces if self._rooms.watched_live(piece.room_id)]
        if not watched:
            return  # nobody here asked: not worth a signature check
        keys = self._keys.keys
        if keys.signer(message.headers, message.subject, message.data) != publisher:
            forged(message.headers.get(DAEMON_HEADER), message.subject, "live reply pieces")
            return
        refused = ""
        for piece in watched:
            if self._holder_of(piece.room_id) == publisher:
                self._rooms.show_live(piece)
            else:
                refused = piece.room_id
        if refused:  # once a message: what its publisher may not say cannot flood the log
            forged(publisher, message.subject, f"live pieces of room {refused!r} it does not hold")
