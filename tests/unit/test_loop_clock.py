"""On trio a connection reads its run's clock directly (no lookup of the run per reading).

The clock is bound when a connection (or a memory stream) first asks for the loop's
primitives, so each run must get its own: a later run with another clock (a test's
``MockClock``) must not read the first run's. Deadlines fire from the run's one timer
task (trio has no timers of its own), which each run starts for itself.
"""

from __future__ import annotations

import functools
from typing import Any

import trio
import trio.testing
from structlog.testing import capture_logs

from mesh import open_peer, serve_peer
from mesh.agents.echo import agent
from transports import memory_stream_pair
from transports._loop import Clock, current_loop


def test_each_trio_run_reads_its_own_clock() -> None:
    for jump in (100.0, 250.0):
        clock = trio.testing.MockClock()

        async def main(jump: float = jump, clock: trio.testing.MockClock = clock) -> None:
            loop = current_loop()
            clock.jump(jump)
            assert loop.now() == trio.current_time() == clock.current_time()

        trio.run(main, clock=clock)


def test_a_call_times_out_on_the_runs_clock() -> None:
    """A deadline is measured on the run's clock: under an autojumping ``MockClock`` a
    call to a tool that sleeps a minute times out at once, in two runs in a row."""
    for _ in range(2):
        clock = trio.testing.MockClock(autojump_threshold=0)
        outcome: list[BaseException] = []

        async def main(outcome: list[BaseException] = outcome) -> None:
            client, server = memory_stream_pair()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_peer, server, agent)
                async with open_peer(client, agent=agent.id) as peer:
                    started = trio.current_time()
                    try:
                        await peer.call_tool("echo", {"message": "x", "delay": 60}, timeout=5)
                    except Exception as failed:
                        outcome.append(failed)
                    assert 5 <= trio.current_time() - started < 60
                await server.aclose()

        trio.run(main, clock=clock)
        assert [type(exc).__name__ for exc in outcome] == ["CallTimeout"]


def _tasks_in_run() -> int:
    root = trio.lowlevel.current_root_task()
    assert root is not None
    count, todo = 0, [root]
    while todo:
        task = todo.pop()
        count += 1
        todo.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return count


def test_the_clocks_of_a_run_share_one_task_and_fire_in_deadline_order() -> None:
    """Each link's clock used to be a task of its own on trio (2.7 KiB an idle link held);
    a thousand clocks now add one task to the run, the timers', and fire in order."""
    fired: list[int] = []

    async def main() -> None:
        loop = current_loop()
        before = _tasks_in_run()
        clocks = [Clock(loop, functools.partial(fired.append, i)) for i in range(1000)]
        for i, clock in enumerate(clocks):
            clock.arm(loop.now() + 1000 - i)  # the last armed is due first
        assert _tasks_in_run() <= before + 1
        await trio.sleep(2000)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert fired == list(range(999, -1, -1))


def test_a_timer_that_fails_is_logged_and_the_others_still_fire() -> None:
    """A system task's error would end the run: the timers' task logs it and goes on."""
    fired: list[str] = []

    def fail() -> None:
        raise RuntimeError("a bug in a deadline's callback")

    async def main() -> None:
        loop = current_loop()
        Clock(loop, fail).arm(loop.now() + 1)
        Clock(loop, functools.partial(fired.append, "later")).arm(loop.now() + 2)
        await trio.sleep(3)

    with capture_logs() as logs:
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert fired == ["later"]
    assert [entry["event"] for entry in logs if entry["log_level"] == "error"] == [
        "transports.timer_failed"
    ]


def test_cancelled_timers_do_not_pile_up() -> None:
    """A clock brought forward cancels its timer each time (a call whose deadline is the
    nearest): the cancelled ones are dropped once they are most of the heap, not kept
    until the deadlines they had."""

    async def main() -> None:
        loop = current_loop()
        clock = Clock(loop, lambda: None)
        far = loop.now() + 10_000
        for i in range(10_000):
            clock.arm(far - i)
        timer: Any = clock._timer
        assert len(timer._timers._heap) <= 202
        clock.stop()

    trio.run(main)
