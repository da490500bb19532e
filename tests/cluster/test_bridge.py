"""nats-py's asyncio-only code, driven from either backend: results, errors, cancel, callbacks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from mesh.cluster._bridge import open_nats_loop

pytestmark = pytest.mark.anyio

GUARD = 10.0


async def test_operations_return_and_raise_as_they_would_on_asyncio() -> None:
    async with open_nats_loop() as loop:

        async def answer() -> int:
            await asyncio.sleep(0)  # really asyncio, whichever backend the test runs on
            return 42

        async def fail() -> None:
            raise ValueError("from the NATS side")

        with anyio.fail_after(GUARD):
            assert await loop.run(answer) == 42
            with pytest.raises(ValueError, match="from the NATS side"):
                await loop.run(fail)


async def test_cancelling_the_caller_cancels_the_operation() -> None:
    started, cancelled = anyio.Event(), anyio.Event()
    async with open_nats_loop() as loop:

        async def forever() -> None:
            loop.to_mesh(started.set)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                loop.to_mesh(cancelled.set)
                raise

        with anyio.fail_after(GUARD):
            async with anyio.create_task_group() as tg:
                tg.start_soon(loop.run, forever)
                await started.wait()
                tg.cancel_scope.cancel()
            await cancelled.wait()


async def test_a_background_pump_delivers_to_the_mesh_loop_and_a_broken_callback_is_logged() -> (
    None
):
    got: list[int] = []
    done = anyio.Event()

    def deliver(n: int) -> None:
        got.append(n)
        if n == 3:
            done.set()

    def broken(_: int) -> None:
        raise RuntimeError("a bug in a callback")

    async with open_nats_loop() as loop:

        async def pump() -> None:
            for n in range(1, 4):
                loop.to_mesh(broken, n)
                loop.to_mesh(deliver, n)
                await asyncio.sleep(0)

        with capture_logs() as logs, anyio.fail_after(GUARD):
            loop.spawn(pump)
            await done.wait()
    assert got == [1, 2, 3]
    assert sum(entry["event"] == "cluster.callback_failed" for entry in logs) == 3


async def test_what_is_sent_runs_in_order_and_a_failure_reaches_the_mesh_loop() -> None:
    ran: list[int] = []
    failures: list[str] = []
    failed = anyio.Event()

    def on_error(exc: Exception) -> None:
        failures.append(str(exc))
        failed.set()

    async with open_nats_loop() as loop:

        def job(n: int) -> Callable[[], Awaitable[None]]:
            async def run() -> None:
                await asyncio.sleep(0)  # on the NATS loop: a later send must still wait for it
                if n == 50:
                    raise OSError("the socket is gone")
                ran.append(n)

            return run

        with anyio.fail_after(GUARD):
            for n in range(100):
                await loop.send(job(n), on_error)
            await failed.wait()
            flushed = anyio.Event()

            async def mark() -> None:
                loop.to_mesh(flushed.set)

            await loop.send(mark, on_error)
            await flushed.wait()
    assert ran == [n for n in range(100) if n != 50]
    assert failures == ["the socket is gone"]


async def test_deliveries_queued_before_the_mesh_loop_wakes_cross_in_one_wake_up() -> None:
    """Under trio each crossing wakes the other thread; many deliveries share one.
    (On asyncio nats-py shares the loop: nothing crosses, and the order is the same.)"""
    got: list[int] = []
    done = anyio.Event()
    wake_ups = 0
    async with open_nats_loop() as loop:
        token: Any = getattr(loop, "_token", None)
        if token is not None:

            class Counting:
                def run_sync_soon(self, *args: Any) -> None:
                    nonlocal wake_ups
                    wake_ups += 1
                    token.run_sync_soon(*args)

            loop._token = Counting()  # type: ignore[attr-defined]

        def deliver(n: int) -> None:
            got.append(n)
            if n == 999:
                done.set()

        async def burst() -> None:  # one NATS read's worth of messages, handed over at once
            for n in range(1000):
                loop.to_mesh(deliver, n)

        with anyio.fail_after(GUARD):
            await loop.run(burst)
            await done.wait()
    assert got == list(range(1000))
    # Far fewer than one each (1,000, before): trio may drain while the NATS thread is still
    # queueing (the GIL switches threads every 5 ms, and a loaded machine preempts the
    # thread more often: 35 seen beside a CPU hog), and the run's own result comes back too.
    assert wake_ups <= 100
