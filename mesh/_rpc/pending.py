"""The calls awaiting an answer: one sans-I/O table for every way the mesh calls out.

A call is *started* under a key that correlates its answer (a request id on a
link, a reply subject over NATS) with a deadline of ``now + timeout``. Progress
from the other side pushes the deadline out by ``timeout`` again, never past a
hard cap (``max_duration`` after the start, or the call's own timeout if that is
longer), so a chatty but stuck handler still ends. A call ends in exactly one of
four ways, each of which takes it out of the table and hands it back to the
driver, which says what it means on its wire:

- :meth:`PendingCalls.finish`: its answer came, or it failed on the way out
  (None: late, or never ours);
- :meth:`PendingCalls.abandon`: the caller gave up (the driver tells the peer
  to cancel if it gets the call back);
- :meth:`PendingCalls.expired`: its deadline passed (the driver fails it with
  ``CallTimeout`` and tells the peer);
- :meth:`PendingCalls.lose`: the link or the peer is gone (the driver fails it
  at once with the reason).

It owns no clock, task or socket: the driver passes ``now`` and asks
:meth:`~PendingCalls.next_deadline` when to look again. :class:`~mesh._rpc.session.Session`
drives one per connection; the cluster's remote calls (``mesh/cluster/_calls.py``)
drive one per daemon. Whatever a driver needs to describe a call travels as its
``info``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

__all__ = ["DEFAULT_CALL_TIMEOUT", "MAX_CALL_DURATION", "PendingCall", "PendingCalls"]

#: A call's deadline unless the caller says otherwise: long enough for a slow tool,
#: short enough that a wedged agent is noticed within a minute.
DEFAULT_CALL_TIMEOUT: Final = 30.0
#: Progress may push a deadline out, but never past this many seconds after the start.
MAX_CALL_DURATION: Final = 600.0

# Ended calls leave their deadline in the heap until it is popped; rebuild the heap
# when dead entries outnumber live ones by this factor, keeping memory proportional
# to calls in flight and the cost amortised O(1) per call.
_HEAP_SLACK: Final = 2
_HEAP_MIN_REBUILD: Final = 256

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


@dataclass(slots=True)
class PendingCall(Generic[K, T]):
    """One call in flight: its key, the driver's ``info``, and its deadlines."""

    key: K
    info: T
    timeout: float
    deadline: float
    hard_deadline: float


class PendingCalls(Generic[K, T]):
    """The calls in flight, by key; see the module docstring."""

    def __init__(self, *, max_duration: float = MAX_CALL_DURATION) -> None:
        self._max_duration = max_duration
        self._calls: dict[K, PendingCall[K, T]] = {}
        self._deadlines: list[tuple[float, int, K]] = []
        self._order = 0  # ties on a deadline never compare keys

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, key: object) -> bool:
        return key in self._calls

    def get(self, key: K) -> PendingCall[K, T] | None:
        return self._calls.get(key)

    def start(self, key: K, info: T, *, now: float, timeout: float) -> PendingCall[K, T]:
        """Hold a call until it ends; its deadline is ``now + timeout``."""
        cap = timeout if timeout > self._max_duration else self._max_duration
        call = PendingCall(key, info, timeout, now + timeout, now + cap)
        self._calls[key] = call
        self._push(call.deadline, key)
        return call

    def finish(self, key: K) -> PendingCall[K, T] | None:
        """Its answer came, or it failed on the way out: the call, or None if it is not
        ours (any more)."""
        return self._calls.pop(key, None)

    def abandon(self, key: K) -> PendingCall[K, T] | None:
        """The caller gave up: the call (tell the peer to cancel it), or None if it had ended."""
        return self._calls.pop(key, None)

    def progressed(self, key: K, now: float) -> PendingCall[K, T] | None:
        """The other side is still at it: push the deadline out (up to the cap)."""
        call = self._calls.get(key)
        if call is None:
            return None
        extended = min(now + call.timeout, call.hard_deadline)
        if extended > call.deadline:
            call.deadline = extended
            self._push(extended, key)
        return call

    def expired(self, now: float) -> list[PendingCall[K, T]]:
        """The calls whose deadline has passed at ``now``, taken out of the table."""
        heap = self._deadlines
        due: list[PendingCall[K, T]] = []
        while heap and heap[0][0] <= now:
            deadline, _, key = heapq.heappop(heap)
            call = self._calls.get(key)
            if call is None or call.deadline > deadline:
                continue  # ended, or pushed out by progress (a later entry exists)
            del self._calls[key]
            due.append(call)
        return due

    def lose(
        self, which: Callable[[PendingCall[K, T]], bool] | None = None
    ) -> list[PendingCall[K, T]]:
        """The link (``which`` None: every call) or a peer is gone: those calls, taken out."""
        if which is None:
            lost = list(self._calls.values())
            self._calls.clear()
            self._deadlines.clear()
            return lost
        lost = [call for call in self._calls.values() if which(call)]
        for call in lost:
            del self._calls[call.key]
        return lost

    def next_deadline(self) -> float | None:
        """The earliest deadline of a call still in the table; None if there is none."""
        heap = self._deadlines
        while heap:
            deadline, _, key = heap[0]
            call = self._calls.get(key)
            if call is not None and call.deadline <= deadline:
                return deadline
            heapq.heappop(heap)
        return None

    def _push(self, deadline: float, key: K) -> None:
        self._order += 1
        heap = self._deadlines
        heapq.heappush(heap, (deadline, self._order, key))
        if len(heap) > _HEAP_MIN_REBUILD and len(heap) > _HEAP_SLACK * len(self._calls) + (
            _HEAP_MIN_REBUILD
        ):
            self._deadlines = [
                (call.deadline, i, key) for i, (key, call) in enumerate(self._calls.items())
            ]
            heapq.heapify(self._deadlines)
