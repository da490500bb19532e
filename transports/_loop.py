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
Both have timers without a task of their own: asyncio's ``loop.call_at``, and on
trio, which has none, the same from one task per run (``_trio_loop``'s
``TrioTimers``). On trio, cancel scopes and task groups
are trio's own: anyio's wrap them, and since anyio 4.14 its ``start_soon`` makes a
task handle (another scope and an event) for every task, a served call's worth.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import heapq
import math
import time
from collections.abc import Callable, Coroutine, Iterable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import sniffio

from transports._logging import get_logger

__all__ = [
    "Cancellable",
    "Clock",
    "Loop",
    "Scope",
    "Spawner",
    "StreamLock",
    "Tasks",
    "Timer",
    "Wakeup",
    "current_loop",
]

log = get_logger("transports.loop")


class Wakeup(Protocol):
    """Parks one task until :meth:`set`; :meth:`set` before :meth:`wait` makes it return at once."""

    def set(self, value: Any = None) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> Any: ...


class Timer(Protocol):
    def cancel(self) -> None: ...


class Cancellable(Protocol):
    def cancel(self) -> object: ...


class Scope(Cancellable, Protocol):
    """A cancel scope: anyio's on asyncio, trio's own on trio."""

    @property
    def cancel_called(self) -> bool: ...

    @property
    def cancelled_caught(self) -> bool: ...

    deadline: float

    def __enter__(self) -> object: ...

    #: True when it caught its own cancellation: a ``with`` of it may end without raising.
    def __exit__(self, *exc_info: Any) -> bool: ...


class Tasks(Protocol):
    """Where tasks run: anyio's task group on asyncio, trio's own nursery on trio."""

    @property
    def cancel_scope(self) -> Cancellable: ...

    def start_soon(
        self, func: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: Any = None
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class Loop:
    """The running loop's clock, one-shot wake-ups, and timers."""

    now: Callable[[], float]
    wakeup: Callable[[], Wakeup]
    #: ``call_at(when, callback)`` runs ``callback()`` at ``when`` on this loop's
    #: clock, in the context it was called in, with no task of the caller's.
    call_at: Callable[[float, Callable[[], None]], Timer]
    #: A new cancel scope: anyio's asyncio class (``anyio.CancelScope()`` looks the
    #: backend up on every construction, this builds one directly), or trio's own.
    cancel_scope: Callable[[], Scope]
    #: A new task group: ``anyio.create_task_group()``, or trio's own nursery.
    task_group: Callable[[], AbstractAsyncContextManager[Tasks]]
    #: asyncio's ``loop.create_task`` (a task of the loop's own); None on trio, whose
    #: every task is some nursery's.
    create_task: Callable[..., asyncio.Task[Any]] | None = None


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
    current_time = trio.current_time
    heappush, heappop = heapq.heappush, heapq.heappop
    copy_context = contextvars.copy_context

    class TrioTimer:
        """One ``call_at``: ordered by when it is due; ``cancel`` lets go of the callback."""

        __slots__ = ("_callback", "_context", "_timers", "when")
        _callback: Callable[[], None] | None
        _context: contextvars.Context | None

        def __init__(self, when: float, callback: Callable[[], None], timers: TrioTimers) -> None:
            self.when = when
            self._callback = callback
            self._context = copy_context()  # as asyncio's call_at does
            self._timers = timers

        def __lt__(self, other: TrioTimer) -> bool:
            return self.when < other.when

        def cancel(self) -> None:
            if self._callback is not None:  # neither fired nor cancelled yet
                self._callback = None
                self._context = None
                self._timers.cancelled()

    class TrioTimers:
        """trio's ``call_at``: one system task per run sleeps until the earliest timer
        is due and runs what is due, each callback in the context it was armed in, as
        asyncio's loop runs its ``call_at`` callbacks.

        trio has no timers, so each link's clock used to be a task of its own, waiting
        in a cancel scope with a deadline: 2.7 KiB held per idle link (the task, its
        coroutines and context, trio's scope and its status's two sets, anyio's scope
        around it), where asyncio's link holds one ``TimerHandle``. A timer here is a
        heap entry and a copied context. Cancelled timers are dropped when they come
        due, or all at once when they are most of the heap (as asyncio does).
        """

        __slots__ = ("_cancelled", "_heap", "_waiting")

        def __init__(self) -> None:
            self._heap: list[TrioTimer] = []
            self._cancelled = 0  # cancelled timers still in the heap
            self._waiting: trio.CancelScope | None = None  # the task's sleep, while it sleeps

        def call_at(self, when: float, callback: Callable[[], None]) -> TrioTimer:
            timer = TrioTimer(when, callback, self)
            heappush(self._heap, timer)
            waiting = self._waiting
            if waiting is not None and when < waiting.deadline:
                waiting.deadline = when  # wakes the task sooner
            return timer

        def cancelled(self) -> None:
            self._cancelled += 1
            heap = self._heap
            if self._cancelled > 100 and self._cancelled * 2 > len(heap):
                heap[:] = [timer for timer in heap if timer._callback is not None]
                heapq.heapify(heap)
                self._cancelled = 0

        async def run(self) -> None:
            """The system task: until the run ends (its cancellation ends it)."""
            heap = self._heap
            while True:
                with trio.CancelScope(deadline=heap[0].when if heap else math.inf) as waiting:
                    self._waiting = waiting
                    await trio.sleep_forever()
                self._waiting = None
                now = current_time()
                while heap and heap[0].when <= now:
                    timer = heappop(heap)
                    callback, context = timer._callback, timer._context
                    if callback is None or context is None:
                        self._cancelled -= 1
                        continue
                    timer._callback = None
                    timer._context = None
                    try:
                        context.run(callback)
                    except Exception:  # a system task's error would end the run
                        log.exception("transports.timer_failed", callback=repr(callback))

    timers_of_run: trio.lowlevel.RunVar[TrioTimers] = trio.lowlevel.RunVar("transports_timers")

    def call_at(when: float, callback: Callable[[], None]) -> Timer:
        """``call_at`` on this run's timers, started by the run's first timer."""
        try:
            timers = timers_of_run.get()
        except LookupError:
            timers = TrioTimers()
            timers_of_run.set(timers)
            trio.lowlevel.spawn_system_task(timers.run, name="transports.timers")
        return timers.call_at(when, callback)

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

    class TrioNursery:
        """trio's own nursery, leaving as anyio's task group does: errors in a group,
        and a group of nothing but cancellations as one cancellation (so that an
        ``except`` of the cancelled exception around it still sees it)."""

        __slots__ = ("_manager",)

        def __init__(self) -> None:
            self._manager = trio.open_nursery(strict_exception_groups=True)

        async def __aenter__(self) -> trio.Nursery:
            return await self._manager.__aenter__()

        async def __aexit__(self, *exc_info: Any) -> bool:
            try:
                return bool(await self._manager.__aexit__(*exc_info))
            except BaseExceptionGroup as group:
                if group.split(trio.Cancelled)[1] is not None:
                    raise
                leaf: BaseException = group
                while isinstance(leaf, BaseExceptionGroup):
                    leaf = leaf.exceptions[0]
                raise leaf from group

    return Loop(trio.current_time, TrioWakeup, call_at, trio.CancelScope, TrioNursery)


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
            Loop(
                _clock_of(loop),
                wakeup,
                loop.call_at,
                type(anyio.CancelScope()),
                anyio.create_task_group,
                loop.create_task,
            ),
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


class Clock:
    """One deadline clock for whatever keeps deadlines (a link's calls and heartbeats,
    a daemon's calls to others): ``due()`` fires what is due at the earliest deadline
    armed and says the next one (None: nothing left).

    It is one ``call_at`` timer at a time, on either loop: no task of its own.
    :meth:`arm` only ever brings the target forward: a later deadline is found by
    ``due()`` when the earlier one fires.
    """

    __slots__ = ("_call_at", "_due", "_stopped", "_timer", "target")

    def __init__(self, loop: Loop, due: Callable[[], float | None]) -> None:
        self._call_at = loop.call_at
        self._due = due
        #: When the clock fires next (``math.inf``: not armed).
        self.target = math.inf
        self._timer: Timer | None = None  # the pending call_at
        self._stopped = False

    def arm(self, deadline: float) -> None:
        """Fire at ``deadline`` if that is earlier than the target (else nothing to do)."""
        if deadline >= self.target or self._stopped:
            return
        self.target = deadline
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._call_at(deadline, self._fire)

    def stop(self) -> None:
        """Never fire again: the timer is cancelled (and lets go of this clock)."""
        self._stopped = True
        self.target = math.inf
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self.target = math.inf
        deadline = self._due()
        if deadline is not None:
            self.arm(deadline)


class Spawner:
    """Starts tasks that can be stopped one by one: on asyncio tasks of the loop's own,
    cancelled directly; on trio tasks of the group given, each in a cancel scope of its
    own. Neither goes through anyio's ``start_soon``, whose task handle (a scope and an
    event per task) was a large share of a served call's CPU.

    A task cancelled before its first step still starts, and stops at its first wait,
    as in a cancelled scope: otherwise an awaitable it was handed would never be
    awaited. asyncio's tasks are no group's: their owner waits for them with :meth:`wait`.
    """

    __slots__ = ("_create_task", "_new_scope")

    def __init__(self, loop: Loop) -> None:
        self._new_scope = loop.cancel_scope
        self._create_task = loop.create_task

    def start(
        self,
        tasks: Tasks,
        func: Callable[..., Coroutine[Any, Any, None]],
        *args: Any,
        name: str | None = None,
    ) -> Cancellable:
        """Run ``func(*args)`` (in ``tasks`` on trio); what :meth:`cancel` stops."""
        if self._create_task is not None:
            task = _LoopTask()
            task.task = self._create_task(task.run(func, args), name=name)
            return task
        scope = self._new_scope()
        tasks.start_soon(_in_scope, scope, func, args, name=name)
        return scope

    @staticmethod
    async def wait(started: Iterable[Cancellable], timeout: float) -> int:
        """Wait (``timeout`` at most, shielded) for asyncio's tasks among ``started`` to
        end; how many had not (trio's are their group's, which waits for them)."""
        tasks = [
            run.task
            for run in started
            if isinstance(run, _LoopTask) and run.task is not None and not run.task.done()
        ]
        if not tasks:
            return 0
        with anyio.CancelScope(shield=True):
            _, running = await asyncio.wait(tasks, timeout=timeout)
        return len(running)


class _LoopTask:
    """asyncio: a task of the loop's own, whose cancel waits for its first step."""

    __slots__ = ("cancelled", "started", "task")

    def __init__(self) -> None:
        self.started = False
        self.cancelled = False
        self.task: asyncio.Task[None] | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.started and self.task is not None:
            self.task.cancel()  # else it cancels itself at its first step

    async def run(self, func: Callable[..., Coroutine[Any, Any, None]], args: Any) -> None:
        self.started = True
        if self.cancelled:
            self.cancel()  # raises at the first wait, as a cancelled scope would
        await func(*args)


async def _in_scope(
    scope: Scope, func: Callable[..., Coroutine[Any, Any, None]], args: tuple[Any, ...]
) -> None:
    with scope:
        await func(*args)
