"""nats-py's asyncio-only code, driven from either backend: results, errors, cancel, callbacks."""

from __future__ import annotations

import asyncio

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
