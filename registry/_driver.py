"""The async driver that calls ``Registry.expire`` when deadlines pass.

The table is pure and never reads a clock; this is the one place that sleeps.
It sleeps until ``next_deadline()`` and is woken early when a registration or a
revival schedules an earlier one, so a new agent with a short interval is not
left waiting behind a long sleep.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NoReturn

import anyio
import anyio.abc
import anyio.lowlevel

from ._table import Registry

__all__ = ["run_expiry"]


async def run_expiry(
    registry: Registry,
    *,
    clock: Callable[[], float] = anyio.current_time,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Expire ``registry``'s agents on time, until cancelled.

    ``clock`` must be the clock whose readings are passed as ``now`` to
    ``register`` and ``heartbeat`` (by default the event loop's,
    ``anyio.current_time``). Start it in a task group with
    ``await tg.start(run_expiry, registry)``.
    """
    wakeup = anyio.Event()

    def earlier_deadline() -> None:
        wakeup.set()

    stop_watching = registry._watch_deadlines(earlier_deadline)
    try:
        task_status.started()
        while True:
            # A fresh event before expire(): no await separates them, so a
            # deadline scheduled from here on (even by a listener) wakes us.
            wakeup = anyio.Event()
            registry.expire(clock())
            deadline = registry.next_deadline()
            delay = math.inf if deadline is None else deadline - clock()
            if delay > 0:
                with anyio.move_on_after(delay):
                    await wakeup.wait()
            else:
                await anyio.lowlevel.checkpoint()  # due already: let others run first
    finally:
        stop_watching()
