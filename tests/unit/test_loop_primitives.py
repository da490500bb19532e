"""The one deadline clock and the one spawn that every link and the cluster's calls use.

Both hide the backend: asyncio's ``call_at`` timer or trio's from one task per run, a
task of the loop's own or a task of the group in a cancel scope. These check by
behaviour, on asyncio and trio.
"""

from __future__ import annotations

import gc
import weakref
from contextvars import ContextVar

import anyio
import pytest

from transports._loop import Clock, Spawner, current_loop

pytestmark = pytest.mark.anyio

_ARMED_BY: ContextVar[str] = ContextVar("armed_by", default="nobody")


async def test_the_clock_fires_at_the_earliest_deadline_and_then_at_the_one_due_names() -> None:
    loop = current_loop()
    fired: list[float] = []
    done = anyio.Event()
    start = loop.now()
    pending = [start + 0.02]  # what `due` says is next after the first firing

    def due() -> float | None:
        fired.append(loop.now())
        if len(fired) == 2:
            done.set()
        return pending.pop() if pending else None

    clock = Clock(loop, due)
    with anyio.fail_after(10):
        clock.arm(start + 5.0)
        clock.arm(start + 0.01)  # earlier: brought forward
        clock.arm(start + 3.0)  # later than the target: changes nothing
        await done.wait()
        clock.stop()
    assert len(fired) == 2
    assert fired[0] >= start + 0.01
    assert fired[1] >= start + 0.02
    assert fired[1] - start < 3.0  # never waited for the later deadlines


async def test_a_stopped_clock_never_fires() -> None:
    loop = current_loop()
    fired: list[float] = []
    later = anyio.Event()

    def fire() -> None:
        fired.append(loop.now())

    def witnessed() -> None:
        later.set()

    clock = Clock(loop, fire)
    witness = Clock(loop, witnessed)  # fires after the stopped clock's deadline
    with anyio.fail_after(10):
        clock.arm(loop.now() + 0.01)
        clock.stop()
        clock.arm(loop.now() + 0.01)  # ignored once stopped
        witness.arm(loop.now() + 0.03)
        await later.wait()
        witness.stop()
    assert fired == []
    assert clock.target == float("inf")


async def test_a_timer_runs_in_the_context_it_was_armed_in() -> None:
    """As asyncio's ``call_at`` does, trio's timers too: the callback sees what the code
    that armed it saw, whatever changed since."""
    loop = current_loop()
    seen: list[str] = []
    done = anyio.Event()

    def due() -> None:
        seen.append(_ARMED_BY.get())
        done.set()

    clock = Clock(loop, due)
    token = _ARMED_BY.set("the caller")
    clock.arm(loop.now() + 0.01)
    _ARMED_BY.reset(token)
    with anyio.fail_after(10):
        await done.wait()
    assert seen == ["the caller"]


async def test_a_stopped_clock_lets_go_of_its_owner_at_once() -> None:
    """A link that ends stops its clock: its timer must not keep the link alive until
    the deadline it was armed for (a heartbeat's, tens of seconds away)."""
    loop = current_loop()

    class Owner:
        def due(self) -> None:
            return None

    owner = Owner()
    gone = weakref.ref(owner)
    clock = Clock(loop, owner.due)
    clock.arm(loop.now() + 3600)
    clock.stop()
    del clock, owner
    gc.collect()
    assert gone() is None


async def test_a_task_cancelled_before_its_first_step_starts_and_stops_at_its_first_wait() -> None:
    seen: list[str] = []

    async def hold() -> None:
        seen.append("started")
        try:
            await anyio.sleep_forever()
        finally:
            seen.append("ended")

    spawner = Spawner(current_loop())
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            started = spawner.start(tg, hold, name="hold")
            started.cancel()
            assert await spawner.wait([started], timeout=5) == 0
    assert seen == ["started", "ended"]


async def test_each_task_is_cancelled_alone() -> None:
    ended: dict[str, anyio.Event] = {"a": anyio.Event(), "b": anyio.Event()}
    cancelled: list[str] = []
    running = anyio.Event()

    async def hold(name: str) -> None:
        try:
            if name == "b":
                running.set()
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(name)
            raise
        finally:
            ended[name].set()

    spawner = Spawner(current_loop())
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            a = spawner.start(tg, hold, "a")
            b = spawner.start(tg, hold, "b")
            await running.wait()
            a.cancel()
            await ended["a"].wait()
            assert cancelled == ["a"]
            b.cancel()
            await ended["b"].wait()
            assert await spawner.wait([a, b], timeout=5) == 0
    assert cancelled == ["a", "b"]


async def test_the_task_group_leaves_with_a_tasks_error_in_a_group_and_a_cancel_as_one() -> None:
    """The loop's task group leaves as anyio's does: a task's error in a group, whatever
    siblings were cancelled beside it; a group of nothing but cancellations as the one
    cancellation, which the cancel scope that caused it catches."""
    loop = current_loop()

    async def fail() -> None:
        raise ValueError("boom")

    async def fail_beside_a_sleeper() -> None:
        async with loop.task_group() as tasks:
            tasks.start_soon(anyio.sleep_forever)
            tasks.start_soon(fail)

    with pytest.raises(ExceptionGroup) as raised:
        await fail_beside_a_sleeper()
    assert [type(error) for error in raised.value.exceptions] == [ValueError]

    with anyio.fail_after(10), anyio.CancelScope() as scope:
        async with loop.task_group() as tasks:
            tasks.start_soon(anyio.sleep_forever)
            scope.cancel()
    assert scope.cancelled_caught
