"""Watching a room: its recorded history, then its live events, in order, each once.

Publishing never waits: each observer has a bounded buffer, and one that falls
``max_buffer`` events behind is dropped with :class:`ObserverTooSlow` rather than
allowed to hold the room back. Nothing is lost by that: every event is durable
before it is published, so the observer subscribes again with ``since=`` the
last ``seq`` it saw and reads the rest from the log.

An observer is attached *before* the history is read, and events are told apart
by ``seq``, so an event recorded while the history was being read is seen once,
not twice and not never. Iteration ends when the room stops for a reason other
than ``PAUSED`` (a paused room is still followed), or when the manager closes.

An observer attached with ``deltas=True`` also receives ``DELTA`` events, the
pieces of a reply being written. They are best effort: one is skipped, not
queued, for an observer whose buffer is half full, so a slow reader of a
chatty stream falls behind on pieces, never on the recorded events.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Final, Generic, TypeVar, cast

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mesh.rooms._errors import ObserverTooSlow
from mesh.rooms._events import DeltaEvent, LiveEvent, RoomEvent, StoppedEvent
from mesh.rooms._model import StopReason

__all__ = ["DEFAULT_OBSERVER_BUFFER", "Observers", "RoomEvents"]

#: Events an observer may fall behind: several hundred turns of a busy room.
DEFAULT_OBSERVER_BUFFER: Final = 1024


#: What an observer yields: ``RoomEvent``, or ``LiveEvent`` when it takes deltas.
E = TypeVar("E", bound=LiveEvent)


def _ends(event: LiveEvent) -> bool:
    return isinstance(event, StoppedEvent) and event.reason is not StopReason.PAUSED


class RoomEvents(Generic[E]):
    """An async iterator of one room's events: ``async for event in events: ...``."""

    def __init__(
        self,
        room_id: str,
        receive: MemoryObjectReceiveStream[LiveEvent],
        observer: _Observer,
        *,
        since: int,
    ) -> None:
        self.room_id = room_id
        self._receive = receive
        self._observer = observer
        self._history: deque[LiveEvent] = deque()
        self._last = since
        self._finished = False
        self._opened: tuple[str, int, int] | None = None  # the last turn opening yielded

    def add_history(self, events: Iterable[RoomEvent]) -> None:
        """Queue recorded events to yield before the live ones (older than ``since`` skipped)."""
        self._history.extend(e for e in events if e.seq > self._last)

    def add_opening(self, event: DeltaEvent) -> None:
        """Queue, after the history, the ``DELTA`` that opened the turn in flight."""
        self._history.append(event)

    @property
    def last_seq(self) -> int:
        """The ``seq`` of the last event yielded (or ``since``)."""
        return self._last

    def __aiter__(self) -> RoomEvents[E]:
        return self

    async def __anext__(self) -> E:
        if self._finished:
            raise StopAsyncIteration
        event = self._history.popleft() if self._history else await self._next_live()
        while isinstance(event, DeltaEvent) and not event.text:
            # A turn's opening, once: an observer arriving mid-turn may get it twice. A
            # draw again of the turn (``draw``) opens it anew.
            if self._opened != (event.agent_id, event.turn, event.draw):
                self._opened = (event.agent_id, event.turn, event.draw)
                return cast(E, event)
            event = self._history.popleft() if self._history else await self._next_live()
        if isinstance(event, DeltaEvent):
            return cast(E, event)  # unrecorded: it neither moves last_seq nor ends anything
        self._opened = None  # after a recorded event (an ERROR, say) a turn may open again
        self._last = event.seq
        if _ends(event) and not self._history and not self._pending():
            self._finished = True
        return cast(E, event)

    def _pending(self) -> bool:
        return self._receive.statistics().current_buffer_used > 0

    async def _next_live(self) -> LiveEvent:
        while True:
            try:
                event = await self._receive.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                if self._observer.overflowed:
                    raise ObserverTooSlow(self.room_id, self._observer.max_buffer) from None
                raise StopAsyncIteration from None
            if isinstance(event, DeltaEvent):
                # A piece of a turn already recorded (seen in the history) is stale.
                if event.seq >= self._last:
                    return event
            elif event.seq > self._last:
                return event


class _Observer:
    def __init__(
        self, send: MemoryObjectSendStream[LiveEvent], max_buffer: int, deltas: bool
    ) -> None:
        self.send = send
        self.max_buffer = max_buffer
        self.deltas = deltas
        self.overflowed = False

    def offer_live(self, event: DeltaEvent) -> None:
        if not self.deltas:
            return
        if self.send.statistics().current_buffer_used * 2 >= self.max_buffer:
            return  # best effort: the recorded events keep the room in the buffer
        try:
            self.send.send_nowait(event)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return

    def offer(self, event: RoomEvent) -> bool:
        try:
            self.send.send_nowait(event)
        except anyio.WouldBlock:
            self.overflowed = True
            self.send.close()
            return False
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        return True


class Observers:
    """The observers of one room: attach, publish to all, detach."""

    def __init__(self, room_id: str) -> None:
        self.room_id = room_id
        self._observers: set[_Observer] = set()

    def __len__(self) -> int:
        return len(self._observers)

    def want_live(self) -> bool:
        """Whether any observer asked for ``DELTA`` events."""
        return any(observer.deltas for observer in self._observers)

    def attach(
        self, *, since: int, max_buffer: int = DEFAULT_OBSERVER_BUFFER, deltas: bool = False
    ) -> RoomEvents[LiveEvent]:
        """An observer; it yields ``DELTA`` events too when ``deltas`` (else only recorded ones)."""
        if max_buffer < 1:
            raise ValueError(f"max_buffer must be at least 1, not {max_buffer}")
        send, receive = anyio.create_memory_object_stream[LiveEvent](max_buffer)
        observer = _Observer(send, max_buffer, deltas)
        self._observers.add(observer)
        return RoomEvents(self.room_id, receive, observer, since=since)

    def detach(self, events: RoomEvents[RoomEvent] | RoomEvents[LiveEvent]) -> None:
        observer = events._observer
        self._observers.discard(observer)
        observer.send.close()
        events._receive.close()

    def publish(self, event: RoomEvent) -> None:
        for observer in tuple(self._observers):
            if not observer.offer(event):
                self._observers.discard(observer)

    def publish_live(self, event: LiveEvent) -> None:
        """Offer an unrecorded event (a ``DELTA``) to the observers that asked for them."""
        if isinstance(event, DeltaEvent):
            for observer in tuple(self._observers):
                observer.offer_live(event)

    def close(self) -> None:
        """End every observer's iteration (the manager is closing)."""
        for observer in self._observers:
            observer.send.close()
        self._observers.clear()
