"""The running event loop's cheapest primitives, looked up once per connection.

A mesh call parks its task until the reader hands it the answer; a memory
stream's receiver parks until a frame arrives; writers and clocks park until
there is work. anyio's ``Event`` does this portably, but each
one is a wrapper around the backend's own event around a future or a parking
lot, and ``anyio.Event()`` looks the backend up on every construction: a
measurable share of a call that costs ~25 µs in all (docs/performance.md). So
a connection (or memory stream) asks once which loop it runs on and uses that loop's own
mechanism: an ``asyncio.Future``, or trio's ``wait_task_rescheduled``.

Both wake a parked task exactly once, and cancelling the parked task (anyio's
cancel scopes, on either backend) simply forgets it, so a late wake-up is a no-op.
asyncio also gets timers without a task (``loop.call_at``); trio has none, so
there the clock runs in a task of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import sniffio

__all__ = ["Loop", "StreamLock", "Timer", "Wakeup", "current_loop"]


class Wakeup(Protocol):
    """Parks one task until :meth:`set`; :meth:`set` before :meth:`wait` makes it return at once."""

    def set(self, value: Any = None) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> Any: ...


class Timer(Protocol):
    def cancel(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Loop:
    """The running loop's clock, one-shot wake-ups, and (asyncio only) timers."""

    now: Callable[[], float]
    wakeup: Callable[[], Wakeup]
    #: ``call_at(when, callback)`` runs ``callback()`` at ``when`` on this loop's
    #: clock, with no task; None where the loop has no such thing (trio).
    call_at: Callable[[float, Callable[[], None]], Timer] | None
    #: This backend's ``anyio.CancelScope`` class: ``anyio.CancelScope()`` looks the
    #: backend up on every construction, this builds one directly.
    cancel_scope: Callable[[], anyio.CancelScope]


class _AsyncioWakeup:
    """A future, set at most once; a cancelled waiter leaves it cancelled and ``set`` ignores it."""

    __slots__ = ("_future",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._future: asyncio.Future[Any] = loop.create_future()

    def set(self, value: Any = None) -> None:
        if not self._future.done():
            self._future.set_result(value)

    def is_set(self) -> bool:
        return self._future.done()

    async def wait(self) -> Any:
        return await self._future


@functools.cache
def _trio_loop() -> Loop:
    """trio's primitives, imported only when a connection runs on trio."""
    import outcome
    import trio

    reschedule = trio.lowlevel.reschedule
    current_task = trio.lowlevel.current_task
    wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
    succeeded = trio.lowlevel.Abort.SUCCEEDED

    class TrioWakeup:
        """trio's own parking, without a ParkingLot: one task, woken once."""

        __slots__ = ("_done", "_task", "_value")

        def __init__(self) -> None:
            self._task: trio.lowlevel.Task | None = None
            self._done = False
            self._value: Any = None

        def set(self, value: Any = None) -> None:
            if self._done:
                return
            self._done = True
            self._value = value
            task = self._task
            if task is not None:
                self._task = None
                reschedule(task, outcome.Value(value))

        def is_set(self) -> bool:
            return self._done

        async def wait(self) -> Any:
            if self._done:
                return self._value
            self._task = current_task()
            return await wait_task_rescheduled(self._abort)

        def _abort(self, raise_cancel: Any) -> trio.lowlevel.Abort:
            self._task = None  # cancelled: a later set() must not reschedule it
            return succeeded

    return Loop(trio.current_time, TrioWakeup, None, type(anyio.CancelScope()))


def _trio_run_loop() -> Loop:
    """trio's primitives, with this run's clock read directly: ``trio.current_time()``
    finds the run and then its clock on every call, and a call reads the time three
    times. A run's clock (a test's ``MockClock`` too) is fixed for the run."""
    global _trio_last
    import trio

    clock = trio.lowlevel.current_clock()
    last = _trio_last  # read once: a run in another thread may replace it meanwhile
    if last is None or last[0] is not clock:
        last = _trio_last = (clock, dataclasses.replace(_trio_loop(), now=clock.current_time))
    return last[1]


_trio_last: tuple[object, Loop] | None = None


_last: tuple[asyncio.AbstractEventLoop, Loop] | None = None


def _clock_of(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time``, or what it returns without its Python frame: asyncio's own loops
    read ``time.monotonic()``, and a call reads the time three times."""
    if type(loop).time is asyncio.BaseEventLoop.time:
        return time.monotonic
    return loop.time


def current_loop() -> Loop:
    """The running loop's primitives (call from inside a task on asyncio or trio)."""
    global _last
    if sniffio.current_async_library() == "trio":
        return _trio_run_loop()
    loop = asyncio.get_running_loop()
    last = _last  # read once: a loop in another thread may replace it meanwhile
    if last is None or last[0] is not loop:  # one Loop per event loop, not per connection
        wakeup = functools.partial(_AsyncioWakeup, loop)
        last = _last = (
            loop,
            Loop(_clock_of(loop), wakeup, loop.call_at, type(anyio.CancelScope())),
        )
    return last[1]


class StreamLock:
    """A lock for one stream's reads or its writes, as small as an idle link needs.

    Like ``anyio.Lock(fast_acquire=True)``, an uncontended acquire takes no
    checkpoint; unlike it, the gate holds no deque (600 bytes) until someone waits.
    Waiters are let in in order; ``release`` hands the gate straight to the next.
    """

    __slots__ = ("_waiters", "locked")

    def __init__(self) -> None:
        self.locked = False
        self._waiters: list[Wakeup] | None = None

    async def __aenter__(self) -> None:
        if not self.locked:
            self.locked = True
            return
        if self._waiters is None:
            self._waiters = []
        parked = current_loop().wakeup()
        self._waiters.append(parked)
        try:
            await parked.wait()
        except BaseException:
            if parked in self._waiters:
                self._waiters.remove(parked)
            elif parked.is_set():  # handed the gate, then cancelled: pass it on
                self.release()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        if self._waiters:
            self._waiters.pop(0).set()  # stays locked: it is the next one's now
        else:
            self.locked = False
