"""Two tasks ping-ponging a small message in one process: the physical limit of an in-process call.

The caller encodes a ~100-byte JSON request, hands it to the serving task and
parks; the serving task decodes it, encodes the reply and hands it back; the
caller decodes it. Each hand-over is the loop's own one-shot wake-up, the one
the mesh's core uses (``transports/_loop.py``): an ``asyncio.Future`` on
asyncio, ``trio.lowlevel.wait_task_rescheduled``/``reschedule`` on trio. Not
``asyncio.Queue`` or trio's memory channels: each is a wrapper around that same
parking (a queue of futures, a parking lot), so it would measure the wrapper
too, and not anyio's memory object streams, which the core does not use (an
``anyio.Event`` per blocked receive and a checkpoint before each one). So a
call is two loop iterations, the least any call across two tasks can be, and
the codec work every RPC layer does, as every baseline here does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from bench._measure import decode_reply, encode_request, measure_calls
from bench._registry import Measurement, RunContext, scenario

Handoff = Callable[[], tuple[Callable[[Any], None], Callable[[], Awaitable[Any]]]]


def _asyncio_handoff() -> Handoff:
    """A one-shot box: (put, wait) over a fresh future."""
    loop = asyncio.get_running_loop()

    def box() -> tuple[Callable[[Any], None], Callable[[], Awaitable[Any]]]:
        future: asyncio.Future[Any] = loop.create_future()

        async def wait() -> Any:
            return await future

        return future.set_result, wait

    return box


def _trio_handoff() -> Handoff:
    """A one-shot box over trio's own parking: one task, rescheduled once."""
    import outcome
    import trio

    reschedule = trio.lowlevel.reschedule
    current_task = trio.lowlevel.current_task
    wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled

    def box() -> tuple[Callable[[Any], None], Callable[[], Awaitable[Any]]]:
        state: list[Any] = []  # [task] while parked, [("value", v)] once put first

        def put(value: Any) -> None:
            if state:
                reschedule(state.pop(), outcome.Value(value))
            else:
                state.append(("value", value))

        async def wait() -> Any:
            if state:
                return state.pop()[1]
            state.append(current_task())
            return await wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)

        return put, wait

    return box


@contextlib.asynccontextmanager
async def open_pingpong(backend: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """A serving task on this loop; yields ``call()``, one round trip to it."""
    box = _trio_handoff() if backend == "trio" else _asyncio_handoff()
    decoder, encoder = msgspec.json.Decoder(), msgspec.json.Encoder()
    inbox: list[tuple[Callable[[Any], None], Callable[[], Awaitable[Any]]]] = [box()]

    async def serve() -> None:
        while True:
            frame, answer = await inbox[0][1]()
            inbox[0] = box()  # the next request's box, ready before the answer goes
            answer(encoder.encode(decoder.decode(frame)))

    async def call() -> None:
        put_back, wait_back = box()
        inbox[0][0]((encode_request(1), put_back))
        decode_reply(await wait_back())

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        await anyio.lowlevel.checkpoint()  # the server parks first
        yield call
        tg.cancel_scope.cancel()


@scenario(
    "loop-pingpong",
    group="in-process",
    modes=("sequential",),
    description="two tasks ping-ponging a JSON message over the loop's own wake-up",
)
async def loop_pingpong(ctx: RunContext) -> Measurement:
    async with open_pingpong(ctx.backend) as call:
        return await measure_calls(call, ctx)
