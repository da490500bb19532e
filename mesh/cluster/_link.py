"""The daemon's one NATS connection: kept up, watched, and used through the loop bridge.

:func:`open_nats_link` connects (nats-py redials for ever after that), and
:class:`NatsLink` offers the few operations the cluster needs — publish,
subscribe, request, JetStream publish with an expected sequence, and a
key-value store with per-key TTL — each run on the NATS loop and each turning
nats-py's exceptions into :class:`ClusterError` at this boundary. Listeners
hear every connect and disconnect on the mesh's loop, so the registry can
resync and calls in flight can fail at once.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio

from mesh._logging import get_logger
from mesh._tasks import open_task_group
from mesh._telemetry.metrics import METRICS
from mesh.cluster._bridge import NatsLoop
from mesh.cluster._errors import ClusterError
from mesh.cluster._kv import AckInbox, KvChange, watch_bucket
from mesh.cluster._settings import ClusterSettings, Names

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

__all__ = ["KvChange", "NatsLink", "NatsMessage", "Watch", "open_nats_link"]

log = get_logger("mesh.cluster")

T = TypeVar("T")

#: nats-py redials this often while NATS is away (it tries each server in turn).
RECONNECT_WAIT: Final = 0.5
#: A server that stops answering pings is given up on after two missed ones.
PING_INTERVAL: Final = 5
#: JetStream answers (a publish's ack, a key read) within this, or the op fails.
JS_TIMEOUT: Final = 5.0
#: How long the server keeps a key's expiry marker: watchers that are connected
#: see the expiry; one that was away resyncs from a fresh snapshot instead.
MARKER_TTL: Final = 1.0
#: Headers that mark a KV entry as gone (deleted, purged, or expired by TTL).
_KV_OP: Final = "KV-Operation"
_MARKER: Final = "Nats-Marker-Reason"
_EXPECTED_SUBJECT_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
_TTL: Final = "Nats-TTL"
#: JetStream's codes for "wrong last sequence" (the compare-and-set lost).
_WRONG_LAST_SEQUENCE: Final = frozenset({10071, 10164})


@dataclass(frozen=True, slots=True)
class NatsMessage:
    """A core NATS message, as handed to the mesh's loop."""

    subject: str
    data: bytes
    reply: str
    headers: dict[str, str]

    @property
    def no_responders(self) -> bool:
        return self.headers.get("Status") == "503"


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """A message of a JetStream stream, in stream order."""

    subject: str
    data: bytes
    sequence: int
    headers: dict[str, str]
    pending: int
    #: When the server stored it (epoch seconds, by the server's clock; 0 if unknown).
    stored: float = 0.0


class Watch:
    """A running watch or subscription on the NATS side; ``stop()`` ends it."""

    def __init__(self, link: NatsLink, stop: Callable[[], Awaitable[Any]]) -> None:
        self._link = link
        self._stop = stop

    async def stop(self) -> None:
        if self._link.connected:
            # A ClusterError: the connection went meanwhile; the server forgets it anyway.
            with contextlib.suppress(ClusterError):
                await self._link.run("stop a watch", self._stop)


class NatsLink:
    """One NATS connection for one daemon; see the module docstring."""

    def __init__(self, settings: ClusterSettings, loop: NatsLoop) -> None:
        self.settings = settings
        self.loop = loop
        self.connected = False
        self._ever_connected = False
        self.last_error: str | None = None
        #: The last time NATS refused our credentials (kept: later errors of the same
        #: attempt, "connection closed" and the like, would hide it).
        self.refused: str | None = None
        self.server: str | None = None
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._acks: AckInbox | None = None  # made on the NATS loop, for this connection
        self._acks_of: Client | None = None
        self._listeners: list[Callable[[bool], None]] = []
        self._changed = anyio.Event()
        self._closing = False

    # -- state ------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(connected)`` on the mesh's loop at every connect and disconnect."""
        self._listeners.append(listener)

    async def wait_changed(self) -> None:
        """Until the next connect or disconnect."""
        await self._changed.wait()

    def describe(self) -> str:
        if self.connected:
            return f"connected to {self.server}"
        why = f": {self.last_error}" if self.last_error else ""
        return f"NATS is unreachable ({', '.join(self.settings.servers)}{why})"

    def _set_connected(self, connected: bool) -> None:
        if connected == self.connected:
            return
        self.connected = connected
        nc = self._nc
        url = nc.connected_url if connected and nc is not None else None
        self.server = None if url is None else url.geturl()
        if connected:
            if self._ever_connected:
                METRICS.nats_reconnects.add()
            self._ever_connected = True
            self.last_error = None
            log.info("cluster.nats_connected", server=self.server)
        elif not self._closing:
            log.warning("cluster.nats_disconnected", error=self.last_error)
        self._changed.set()
        self._changed = anyio.Event()
        for listener in tuple(self._listeners):
            listener(connected)

    def _note_error(self, error: str) -> None:
        if error != self.last_error:
            log.info("cluster.nats_error", error=error)
        self.last_error = error
        if _is_authorization(error):
            self.refused = error

    # -- running operations -----------------------------------------------------------------

    async def run(self, what: str, factory: Callable[[], Awaitable[T]]) -> T:
        """``factory()`` on the NATS loop; nats-py's failures become ClusterError (``what``)."""
        import nats.errors

        try:
            return await self.loop.run(factory)
        except (nats.errors.Error, TimeoutError, OSError) as exc:
            detail = str(exc) or type(exc).__name__
            raise ClusterError(f"NATS could not {what}: {detail}") from exc

    @property
    def js(self) -> JetStreamContext:
        if self._js is None:
            raise ClusterError("not connected to NATS yet")
        return self._js

    @property
    def nc(self) -> Client:
        if self._nc is None:
            raise ClusterError("not connected to NATS yet")
        return self._nc

    async def connect(self) -> None:
        """Connect, retrying for ever (run it in a task); returns once connected."""
        import nats

        def to_mesh(function: Callable[..., None], *args: Any) -> Callable[..., Awaitable[None]]:
            async def callback(*_: Any) -> None:
                self.loop.to_mesh(function, *args)

            return callback

        async def on_error(exc: Exception) -> None:
            self.loop.to_mesh(self._note_error, str(exc) or type(exc).__name__)

        names = f"mesh {self.settings.cluster_id}/{self.settings.daemon_id}"
        options = self.settings.connect_options()
        # Answers to this daemon's calls come under its own prefix, which the NATS
        # permissions let only this daemon's user read.
        inbox = Names(self.settings.cluster_id, self.settings.daemon_id).inbox_prefix

        async def connect() -> Client:
            return await nats.connect(
                servers=self.settings.servers,
                name=names,
                max_reconnect_attempts=-1,
                reconnect_time_wait=RECONNECT_WAIT,
                ping_interval=PING_INTERVAL,
                connect_timeout=2,
                inbox_prefix=inbox,
                error_cb=on_error,
                disconnected_cb=to_mesh(self._set_connected, False),
                reconnected_cb=to_mesh(self._set_connected, True),
                **options,
            )

        self._nc = await self.loop.run(connect)
        self._js = self._nc.jetstream(timeout=JS_TIMEOUT)
        self._set_connected(True)

    async def close(self) -> None:
        nc = self._nc
        if nc is None:
            return
        self._nc = self._js = None
        self._closing = True
        try:
            await self.loop.run(nc.close)
        except Exception as exc:  # closing is best effort: the process is going anyway
            log.debug("cluster.nats_close_failed", error=repr(exc))
        self.connected = False

    # -- core NATS ---------------------------------------------------------------------------

    async def publish(
        self, subject: str, data: bytes, *, reply: str = "", headers: dict[str, str] | None = None
    ) -> None:
        nc = self.nc
        await self.run(
            f"publish to {subject}", lambda: nc.publish(subject, data, reply=reply, headers=headers)
        )

    async def send(
        self,
        subject: str,
        data: bytes,
        on_error: Callable[[ClusterError], None],
        *,
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        """Publish without waiting for the NATS loop (under trio; in order with other sends);
        a failure reaches ``on_error`` on the mesh's loop."""
        import nats.errors

        nc = self.nc

        def failed(exc: Exception) -> None:
            if not isinstance(exc, (nats.errors.Error, TimeoutError, OSError, ClusterError)):
                raise exc  # a bug: _call_safely logs it
            detail = str(exc) or type(exc).__name__
            error = exc if isinstance(exc, ClusterError) else None
            on_error(error or ClusterError(f"NATS could not publish to {subject}: {detail}"))

        await self.loop.send(
            lambda: nc.publish(subject, data, reply=reply, headers=headers), failed
        )

    async def subscribe(self, subject: str, on_message: Callable[[NatsMessage], None]) -> Watch:
        """Deliver every message on ``subject`` to ``on_message`` on the mesh's loop."""
        nc, to_mesh = self.nc, self.loop.to_mesh

        async def callback(msg: Msg) -> None:
            to_mesh(
                on_message, NatsMessage(msg.subject, msg.data, msg.reply, dict(msg.headers or {}))
            )

        subscription = await self.run(
            f"subscribe to {subject}", lambda: nc.subscribe(subject, cb=callback)
        )
        return Watch(self, subscription.unsubscribe)

    @property
    def max_payload(self) -> int | None:
        """The largest message the server takes (headers and body), once connected."""
        nc = self._nc
        return None if nc is None else int(nc.max_payload)

    def new_inbox(self) -> str:
        return self.nc.new_inbox()

    # -- JetStream ---------------------------------------------------------------------------

    async def ensure_bucket(self, bucket: str) -> None:
        """A key-value bucket (history 1, file storage) whose keys may carry a TTL."""
        from nats.js.api import KeyValueConfig, StorageType
        from nats.js.errors import BadRequestError

        js = self.js
        config = KeyValueConfig(
            bucket=bucket,
            history=1,
            storage=StorageType.FILE,
            limit_marker_ttl=MARKER_TTL,
            direct=True,  # reads of one key are answered by any replica, without the API
        )
        try:
            await self.run(f"create bucket {bucket}", lambda: js.create_key_value(config))
        except ClusterError as exc:
            if not isinstance(exc.__cause__, BadRequestError):
                raise
            await self.run(f"open bucket {bucket}", lambda: js.key_value(bucket))

    async def ensure_stream(self, name: str, subjects: str) -> None:
        from nats.js.api import StorageType, StreamConfig

        js = self.js
        config = StreamConfig(
            name=name, subjects=[subjects], storage=StorageType.FILE, allow_direct=True
        )
        await self.run(f"create stream {name}", lambda: js.add_stream(config))

    async def js_publish(
        self,
        subject: str,
        data: bytes,
        *,
        expected_last: int | None = None,
        msg_id: str | None = None,
        ttl: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> int | None:
        """Store a message; its stream sequence, or None if ``expected_last`` was not the last."""
        from nats.js.errors import APIError

        js = self.js
        sent = dict(headers or {})
        if expected_last is not None:
            sent[_EXPECTED_SUBJECT_SEQ] = str(expected_last)
        if msg_id is not None:
            sent["Nats-Msg-Id"] = msg_id
        # The header holds whole seconds; a TTL is never rounded down to nothing.
        seconds = None if ttl is None else max(1, math.ceil(ttl))
        try:
            ack = await self.run(
                f"store a message on {subject}",
                lambda: js.publish(subject, data, headers=sent or None, msg_ttl=seconds),
            )
        except ClusterError as exc:
            cause = exc.__cause__
            if isinstance(cause, APIError) and cause.err_code in _WRONG_LAST_SEQUENCE:
                return None
            raise
        if ack.duplicate:
            # Not stored now: a message with this id was, earlier. Never a write of ours.
            raise ClusterError(f"NATS took the message on {subject} for a duplicate ({msg_id})")
        return int(ack.seq)

    async def last_message(self, stream: str, subject: str) -> StreamEvent | None:
        """The last message stored on ``subject``, or None if there is none."""
        from nats.js.errors import NotFoundError

        js = self.js
        try:
            raw = await self.run(
                f"read {subject}", lambda: js.get_last_msg(stream, subject, direct=True)
            )
        except ClusterError as exc:
            if isinstance(exc.__cause__, NotFoundError):
                return None
            raise
        headers = dict(raw.headers or {})
        stored = raw.time.timestamp() if raw.time is not None else 0.0
        return StreamEvent(subject, raw.data or b"", int(raw.seq or 0), headers, 0, stored)

    # -- key-value ---------------------------------------------------------------------------

    def _kv_subject(self, bucket: str, key: str) -> str:
        return f"$KV.{bucket}.{key}"

    async def kv_put(self, bucket: str, key: str, value: bytes, *, ttl: float) -> int:
        seq = await self.js_publish(self._kv_subject(bucket, key), value, ttl=ttl)
        assert seq is not None  # no expected sequence, so never a lost compare-and-set
        return seq

    async def kv_get(self, bucket: str, key: str) -> tuple[bytes, int] | None:
        """The key's value and revision, or None if it has none (never set, or gone)."""
        entry = await self.kv_entry(bucket, key)
        if entry is None or entry.value is None:
            return None
        return entry.value, entry.revision

    async def kv_entry(self, bucket: str, key: str) -> KvChange | None:
        """The key's value, revision and age (as a watch gives them), or None if it has
        none (never set, or gone)."""
        last = await self.last_message(f"KV_{bucket}", self._kv_subject(bucket, key))
        if last is None or _gone(last.headers):
            return None
        age = max(0.0, time.time() - last.stored) if last.stored else 0.0
        return KvChange(key, last.data, last.sequence, age)

    async def kv_create(self, bucket: str, key: str, value: bytes, *, ttl: float) -> int | None:
        """Set the key only if it has no value; its revision, or None if another holds it."""
        subject = self._kv_subject(bucket, key)
        seq = await self.js_publish(subject, value, expected_last=0, ttl=ttl)
        if seq is not None:
            return seq
        # A deleted or expired key still has its marker as the last message: the
        # key is free, and the compare-and-set must name that marker.
        last = await self.last_message(f"KV_{bucket}", subject)
        if last is not None and not _gone(last.headers):
            return None
        expected = 0 if last is None else last.sequence
        return await self.js_publish(subject, value, expected_last=expected, ttl=ttl)

    async def kv_update(
        self, bucket: str, key: str, value: bytes, *, last: int, ttl: float
    ) -> int | None:
        """Set the key if its revision is still ``last``; the new revision, or None."""
        return await self.js_publish(
            self._kv_subject(bucket, key), value, expected_last=last, ttl=ttl
        )

    async def kv_delete(self, bucket: str, key: str, *, last: int | None = None) -> bool:
        """Delete the key (only if its revision is ``last``, when given); False if it was not."""
        headers = {_KV_OP: "DEL"}
        seq = await self.js_publish(
            self._kv_subject(bucket, key), b"", expected_last=last, headers=headers
        )
        return seq is not None

    async def kv_write_many(
        self, bucket: str, writes: Sequence[tuple[str, bytes | None, float]]
    ) -> list[str | None]:
        """Put (a value) or delete (None) each (key, value, ttl) in one batch: for each,
        None (stored) or why not. One crossing to the NATS loop for the whole batch."""
        nc = self.nc
        messages = []
        for key, value, ttl in writes:
            if value is None:
                messages.append((self._kv_subject(bucket, key), b"", {_KV_OP: "DEL"}))
            else:
                # The header holds whole seconds; a TTL is never rounded down to nothing.
                headers = {_TTL: str(max(1, math.ceil(ttl)))}
                messages.append((self._kv_subject(bucket, key), value, headers))

        async def publish() -> list[str | None]:
            if self._acks is None or self._acks_of is not nc:
                self._acks, self._acks_of = AckInbox(nc), nc
            return await self._acks.publish_many(messages, JS_TIMEOUT)

        return await self.run(f"write to bucket {bucket}", publish)

    async def watch(
        self,
        bucket: str,
        on_change: Callable[[KvChange | None], None],
        *,
        skip: bytes | None = None,
    ) -> Watch:
        """Every key's current value, then ``None`` (caught up), then each change, in order;
        not the values that start with ``skip`` (this daemon's own, by their first bytes:
        skipped before they are decoded or cross to the mesh's loop)."""
        js, to_mesh = self.js, self.loop.to_mesh

        def deliver(change: KvChange | None) -> None:
            to_mesh(on_change, change)

        subscription = await self.run(
            f"watch bucket {bucket}",
            lambda: watch_bucket(js, bucket, deliver, timeout=JS_TIMEOUT, skip=skip),
        )
        return Watch(self, subscription.unsubscribe)

    async def consume(
        self, stream: str, subjects: str, start: int, on_event: Callable[[StreamEvent], None]
    ) -> Watch:
        """Every message of ``stream`` from sequence ``start`` on, in order, then live ones."""
        from nats.js.api import ConsumerConfig, DeliverPolicy

        js, to_mesh = self.js, self.loop.to_mesh

        async def callback(msg: Msg) -> None:
            meta = msg.metadata
            event = StreamEvent(
                msg.subject,
                msg.data,
                int(meta.sequence.stream),
                dict(msg.headers or {}),
                int(meta.num_pending or 0),
            )
            to_mesh(on_event, event)

        policy = DeliverPolicy.BY_START_SEQUENCE if start > 1 else DeliverPolicy.ALL
        config = ConsumerConfig(opt_start_seq=start if start > 1 else None)

        async def subscribe() -> Any:
            return await js.subscribe(
                subjects,
                stream=stream,
                cb=callback,
                ordered_consumer=True,
                deliver_policy=policy,
                config=config,
            )

        subscription = await self.run(f"read stream {stream}", subscribe)
        return Watch(self, subscription.unsubscribe)

    async def purge(self, stream: str, subject: str, *, keep: int = 0) -> None:
        """Remove ``subject``'s messages from ``stream``, all but the last ``keep``."""
        js = self.js
        await self.run(
            f"purge {subject}", lambda: js.purge_stream(stream, subject=subject, keep=keep or None)
        )

    async def stream_last_sequence(self, stream: str) -> int:
        js = self.js
        info = await self.run(f"read stream {stream}", lambda: js.stream_info(stream))
        return int(info.state.last_seq or 0)


def _gone(headers: dict[str, str]) -> bool:
    return headers.get(_KV_OP) in ("DEL", "PURGE") or _MARKER in headers


def _is_authorization(error: str | None) -> bool:
    return error is not None and "authoriz" in error.lower()


@asynccontextmanager
async def open_nats_link(settings: ClusterSettings, loop: NatsLoop) -> AsyncIterator[NatsLink]:
    """Connect for the ``async with``: wait up to ``connect_timeout``, then go on without.

    NATS refusing the daemon's credentials is fatal (a :class:`ClusterError`);
    NATS merely being away is not: the daemon serves its own agents and the
    link keeps dialling.
    """
    link = NatsLink(settings, loop)
    async with open_task_group() as tg:
        connected = anyio.Event()

        async def connect() -> None:
            await link.connect()
            connected.set()

        tg.start_soon(connect)
        with anyio.move_on_after(settings.connect_timeout):
            await connected.wait()
        if not connected.is_set():
            if link.refused is not None:
                tg.cancel_scope.cancel()
                raise ClusterError(
                    f"NATS at {settings.nats} refused this daemon's credentials: {link.refused}"
                )
            log.warning("cluster.nats_unreachable", servers=settings.servers, error=link.last_error)
        try:
            yield link
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await link.close()
