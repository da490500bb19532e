"""Key-value writes in batches and a bucket's watch, as code that runs on the NATS loop.

**Writes.** A JetStream publish is a request: nats-py's ``js.publish`` makes an
inbox, a future and a task switch per message and waits for each ack in turn.
A registry of thousands of agents writes many keys at once (a resync, a burst
of registrations), so :class:`AckInbox` publishes a whole batch back to back,
each with a reply subject under one subscription, and the acks are matched as
they come: one flush for the batch and one wake-up per read of acks, not per
write. A write's outcome is None (stored) or why not.

**Watch.** :func:`watch_bucket` is an ordered push consumer on the bucket's
subjects, last value per key first, then every change: what nats-py's
``KeyValue.watch`` does, without its queue and iterator task between the
consumer and us. An expiry or delete (a ``KV-Operation`` header, or the
server's ``Nats-Marker-Reason``) is a change with no value.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

__all__ = ["AckInbox", "KvChange", "watch_bucket"]

#: Tokens of a v1 ack subject (no domain); the v2 form has 11 or more.
_V1_TOKENS: Final = 9
#: Writes of one batch in flight at once (nats-py's write buffer holds them all).
BATCH: Final = 512
_KV_OP: Final = "KV-Operation"
_MARKER: Final = "Nats-Marker-Reason"
#: Marker reasons that end a key (nats-server 2.11+); others are not changes of a key.
_GONE_REASONS: Final = frozenset({"MaxAge", "Purge", "Remove"})


class KvChange(msgspec.Struct, frozen=True):
    """One key's new value, or its end (``value is None``: deleted, purged or expired)."""

    key: str
    value: bytes | None
    revision: int
    #: Seconds since the server stored it (by the wall clocks involved; 0 if unknown).
    age: float


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _PubAck(msgspec.Struct):
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None


_ACK: Final = msgspec.json.Decoder(_PubAck)


class _Batch:
    __slots__ = ("done", "outcomes", "waiting")

    def __init__(self, size: int) -> None:
        self.outcomes: list[str | None] = ["no ack from JetStream in time"] * size
        self.waiting = size
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def settle(self, index: int, outcome: str | None) -> None:
        self.outcomes[index] = outcome
        self.waiting -= 1
        if self.waiting == 0 and not self.done.done():
            self.done.set_result(None)


class AckInbox:
    """Batched JetStream publishes over one connection; see the module docstring.

    Lives on the NATS loop (made and used there); nats-py keeps its one
    subscription over reconnects, and a write whose ack a drop lost fails its batch
    at the timeout.
    """

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._prefix = nc.new_inbox()
        self._tokens = itertools.count(1)
        self._waiting: dict[str, tuple[_Batch, int]] = {}
        self._subscribed = False

    async def publish_many(
        self, messages: Sequence[tuple[str, bytes, dict[str, str]]], timeout: float
    ) -> list[str | None]:
        """Store each (subject, data, headers); for each, None or why it was not stored."""
        if not self._subscribed:
            await self._nc.subscribe(f"{self._prefix}.*", cb=self._on_ack)
            self._subscribed = True
        outcomes: list[str | None] = []
        for start in range(0, len(messages), BATCH):
            outcomes += await self._publish_batch(messages[start : start + BATCH], timeout)
        return outcomes

    async def _publish_batch(
        self, messages: Sequence[tuple[str, bytes, dict[str, str]]], timeout: float
    ) -> list[str | None]:
        batch = _Batch(len(messages))
        tokens = []
        try:
            for index, (subject, data, headers) in enumerate(messages):
                token = str(next(self._tokens))
                tokens.append(token)
                self._waiting[token] = (batch, index)
                reply = f"{self._prefix}.{token}"
                await self._nc.publish(subject, data, reply=reply, headers=headers)
            # Past the timeout the unanswered keep their "no ack" outcome.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(batch.done), timeout)
        finally:
            for token in tokens:
                self._waiting.pop(token, None)
        return batch.outcomes

    async def _on_ack(self, msg: Msg) -> None:
        waiting = self._waiting.pop(msg.subject[len(self._prefix) + 1 :], None)
        if waiting is None:
            return  # its batch gave up on it
        batch, index = waiting
        batch.settle(index, _outcome(msg))


def _position(reply: str) -> tuple[int, float, int]:
    """A consumer message's stream sequence, stored time (epoch s) and pending count, from
    its ack subject (``$JS.ACK.<stream>.<consumer>.<n>.<sseq>.<dseq>.<ns>.<pending>``, or
    the form with a domain and an account hash); nats-py's ``metadata`` builds a datetime."""
    tokens = reply.split(".")
    if len(tokens) == _V1_TOKENS:
        return int(tokens[5]), int(tokens[7]) / 1e9, int(tokens[8])
    return int(tokens[7]), int(tokens[9]) / 1e9, int(tokens[10])


def _outcome(msg: Msg) -> str | None:
    if msg.headers and msg.headers.get("Status") == "503":
        return "no JetStream stream answers for that subject"
    try:
        ack = _ACK.decode(msg.data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return f"JetStream sent an ack that does not decode: {exc}"
    if ack.error is not None:
        return f"{ack.error.description} (JetStream error {ack.error.err_code})"
    if ack.duplicate:
        return "JetStream took it for a duplicate"
    return None


async def watch_bucket(
    js: JetStreamContext,
    bucket: str,
    on_change: Callable[[KvChange | None], None],
    *,
    timeout: float,
    skip: bytes | None = None,
) -> Any:
    """Every key's current value, then ``None`` (caught up), then each change; the
    subscription (``unsubscribe()`` ends it). Runs on the NATS loop; ``on_change``
    is called there. Values that start with ``skip`` (this daemon's own writes,
    echoed) are not passed on: a delete or an expiry has no value, so it always is."""
    if skip is not None and not skip:
        raise ValueError("skip must be a non-empty prefix: an empty one matches every value")
    from nats.js.api import DeliverPolicy

    prefix = f"$KV.{bucket}."
    caught_up = False
    ready = asyncio.get_running_loop().create_future()

    def up_to_date() -> None:
        nonlocal caught_up
        if not caught_up:
            caught_up = True
            on_change(None)

    async def deliver(msg: Msg) -> None:
        if not ready.done():
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        data = msg.data
        if skip is not None and data.startswith(skip):
            # Our own write, echoed: nothing to mirror, and once caught up nothing to
            # read from its position either.
            if not caught_up and _position(msg.reply)[2] == 0:
                up_to_date()
            return
        sequence, stamp, pending = _position(msg.reply)
        value: bytes | None = data
        known = True
        headers = msg.headers
        if headers:
            reason = headers.get(_MARKER)
            if headers.get(_KV_OP) in ("DEL", "PURGE") or reason in _GONE_REASONS:
                value = None
            elif reason is not None:
                known = False  # a marker of a kind we do not know: no change of the key
        if known:
            age = max(0.0, time.time() - stamp)
            on_change(KvChange(msg.subject[len(prefix) :], value, sequence, age))
        if pending == 0:
            up_to_date()

    subscription = await js.subscribe(
        f"{prefix}>",
        stream=f"KV_{bucket}",
        cb=deliver,
        ordered_consumer=True,
        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
        inactive_threshold=5 * 60,
    )
    try:
        info = await subscription.consumer_info()
    except BaseException:
        ready.cancel()
        await subscription.unsubscribe()
        raise
    ready.set_result(None)
    if info.num_pending == 0 and subscription.delivered == 0:
        up_to_date()  # an empty bucket: caught up at once
    return subscription
