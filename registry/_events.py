"""Fan-out of status changes to sync listeners and async subscribers.

Publishing is synchronous and never waits, so the table's ``register``,
``heartbeat`` and ``expire`` stay plain functions. Each subscriber owns a bounded
anyio memory object stream; when it is full the subscriber is closed with
`SubscriberOverflow` rather than allowed to hold the registry back or to miss
events silently (a consumer that keeps a view of the table cannot tell which
agents a dropped event concerned, so it must resync either way; closing makes
that loud). Publishing must happen on the event-loop thread that the
subscribers' tasks run on, as for any anyio object.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from types import TracebackType

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._errors import SubscriberOverflow
from ._logging import get_logger
from ._types import StatusChange

__all__ = ["DEFAULT_SUBSCRIBER_BUFFER", "Listener", "Subscription"]

_log = get_logger(__name__)

#: Events a subscriber may fall behind before it is closed: a full burst of
#: changes for a mesh of a thousand agents. A consumer further behind than that is
#: better served by a fresh snapshot than by replaying the backlog.
DEFAULT_SUBSCRIBER_BUFFER = 1024

Listener = Callable[[StatusChange], None]


class Subscription:
    """An async iterator of `StatusChange`, opened by ``Registry.subscribe()``.

    Use it as an async context manager, once; events published after
    ``__aenter__`` are delivered in order. If the subscriber falls ``max_buffer``
    events behind, it gets every event buffered so far and then
    `SubscriberOverflow`. Reading it after its ``async with`` has exited raises
    ``anyio.ClosedResourceError``.
    """

    _send: MemoryObjectSendStream[StatusChange]
    _receive: MemoryObjectReceiveStream[StatusChange]

    def __init__(self, hub: _Hub, max_buffer: int) -> None:
        if max_buffer < 1:
            raise ValueError(f"max_buffer must be at least 1, not {max_buffer}")
        self.max_buffer = max_buffer
        self._hub = hub
        self._overflowed = False
        self._entered = False

    async def __aenter__(self) -> Subscription:
        if self._entered:
            raise RuntimeError("a subscription can be entered only once; subscribe again")
        # Created here, not in __init__: streams that are never closed warn, and
        # only a subscription that was entered is sure to reach __aexit__.
        self._send, self._receive = anyio.create_memory_object_stream[StatusChange](self.max_buffer)
        self._entered = True
        self._hub.attach(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._hub.detach(self)
        self._send.close()
        self._receive.close()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> StatusChange:
        if not self._entered:
            # Never attached, so nothing would ever arrive: fail instead of hanging.
            raise RuntimeError("use `async with registry.subscribe() as events:` before reading")
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            if self._overflowed:
                raise SubscriberOverflow(self.max_buffer) from None
            raise StopAsyncIteration from None

    @property
    def overflowed(self) -> bool:
        """True once the registry closed this subscriber for falling behind."""
        return self._overflowed

    def offer(self, change: StatusChange) -> bool:
        """Buffer one change without waiting; close and return False if full."""
        try:
            self._send.send_nowait(change)
        except anyio.WouldBlock:
            self._overflowed = True
            # Closing the send side lets the reader drain what is buffered, then
            # see EndOfStream, which __anext__ turns into SubscriberOverflow.
            self._send.close()
            return False
        return True


class _Hub:
    """The listeners and subscribers of one registry."""

    def __init__(self) -> None:
        self.listeners: list[Listener] = []
        self.subscribers: list[Subscription] = []
        self.overflows = 0
        self.listener_errors = 0
        self._queue: deque[StatusChange] = deque()
        self._publishing = False

    def attach(self, subscription: Subscription) -> None:
        self.subscribers.append(subscription)

    def detach(self, subscription: Subscription) -> None:
        if subscription in self.subscribers:
            self.subscribers.remove(subscription)

    def publish(self, changes: Iterable[StatusChange]) -> None:
        if self._publishing:
            # A listener changed the table while we deliver: its events go after
            # the current ones, so every consumer sees one and the same order.
            self._queue.extend(changes)
            return
        self._publishing = True
        try:
            for change in changes:
                self._deliver(change)
            while self._queue:
                self._deliver(self._queue.popleft())
        finally:
            self._publishing = False
            self._queue.clear()

    def _deliver(self, change: StatusChange) -> None:
        # Iterate over copies: a listener may add or remove listeners.
        for listener in tuple(self.listeners):
            try:
                listener(change)
            except Exception:
                self._failed(listener, change)
        for subscription in tuple(self.subscribers):
            if not subscription.offer(change):
                self._drop(subscription)

    def _failed(self, listener: Listener, change: StatusChange) -> None:
        # One broken listener must not stop the table's bookkeeping or starve the
        # others; the failure is counted and logged with its traceback.
        self.listener_errors += 1
        _log.exception(
            "registry.listener_failed",
            listener=repr(listener),
            agent_id=change.agent_id,
            change=str(change.kind),
        )

    def _drop(self, subscription: Subscription) -> None:
        self.detach(subscription)
        self.overflows += 1
        _log.warning("registry.subscriber_overflow", max_buffer=subscription.max_buffer)
