"""nats-py on whichever event loop the mesh runs on.

nats-py is asyncio-only. On asyncio the client runs on the mesh's own loop and
every operation is a plain ``await``: no thread, no hop. On trio it runs on an
asyncio loop in a thread of its own: operations are submitted to that loop and
awaited from trio, and what NATS delivers (messages, connection events) is
handed back with ``TrioToken.run_sync_soon``, so the cluster's own code always
runs on the mesh's loop, one thread, as the rest of the mesh does.

:class:`NatsLoop` is that one seam: ``run`` an operation there, ``send`` one
whose result nobody waits for, ``spawn`` a background pump there, and
``to_mesh`` a callback back here.

Under trio a crossing costs a wake-up of the other thread (a write to its
wake-up socket) and a task switch on each side. So what crosses without an
answer crosses in batches: every ``send`` queued before the NATS thread wakes
goes in one crossing, in order, and every ``to_mesh`` queued before trio wakes
comes back in one (docs/performance.md measures it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Final, Protocol, TypeVar

import anyio
import anyio.abc
import anyio.to_thread
import sniffio

from mesh._logging import get_logger
from mesh._tasks import open_task_group
from mesh.cluster._errors import ClusterError

__all__ = ["NatsLoop", "open_nats_loop"]

T = TypeVar("T")

log = get_logger("mesh.cluster")

#: The NATS thread's loop gets this long to start, and to finish at shutdown.
THREAD_TIMEOUT: Final = 10.0


class NatsLoop(Protocol):
    """Where nats-py runs, and the way back to the mesh's loop."""

    async def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        """Run ``factory()`` on the NATS loop and return its result (from the mesh's loop)."""
        ...

    async def send(
        self, factory: Callable[[], Awaitable[Any]], on_error: Callable[[Exception], None]
    ) -> None:
        """Run ``factory()`` on the NATS loop in order with earlier sends; a failure goes to
        ``on_error`` on the mesh's loop (under trio without waiting for the NATS loop)."""
        ...

    def spawn(self, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``factory()`` on the NATS loop until it returns or the loop closes."""
        ...

    def to_mesh(self, function: Callable[..., None], *args: Any) -> None:
        """From the NATS loop: call ``function(*args)`` on the mesh's loop, soon."""
        ...


class _SameLoop:
    """asyncio: nats-py shares the mesh's loop; background pumps live in our task group."""

    def __init__(self, tasks: anyio.abc.TaskGroup) -> None:
        self._tasks = tasks

    async def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        return await factory()

    async def send(
        self, factory: Callable[[], Awaitable[Any]], on_error: Callable[[Exception], None]
    ) -> None:
        try:
            await factory()
        except Exception as exc:
            on_error(exc)

    def spawn(self, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._tasks.start_soon(factory)

    def to_mesh(self, function: Callable[..., None], *args: Any) -> None:
        _call_safely(function, *args)


class _ThreadLoop:
    """trio: nats-py on an asyncio loop in a thread; results come back by the trio token."""

    def __init__(self) -> None:
        import trio.lowlevel

        self._token = trio.lowlevel.current_trio_token()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._spawned: set[concurrent.futures.Future[None]] = set()
        self._thread = threading.Thread(target=self._main, name="mesh-nats", daemon=True)
        # Each way, a queue and whether the other side has been woken for it. The side
        # that drains clears the flag *before* it drains, so an item queued meanwhile is
        # either drained now or wakes it again: none is left behind.
        self._outbound: deque[tuple[Callable[[], Awaitable[Any]], Callable[..., None]]] = deque()
        self._outbound_woken = False
        self._outbound_ready: asyncio.Event | None = None  # made on the NATS loop
        self._inbound: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._inbound_woken = False

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._outbound_ready = asyncio.Event()
        sender = asyncio.create_task(self._send_queued(self._outbound_ready))
        self._ready.set()
        await self._stop.wait()
        # What is still running (pumps) is cancelled, and awaited, before the loop goes.
        sender.cancel()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def start(self) -> None:
        self._thread.start()
        with anyio.fail_after(THREAD_TIMEOUT):
            await anyio.to_thread.run_sync(self._ready.wait, abandon_on_cancel=True)

    async def stop(self) -> None:
        for future in list(self._spawned):
            future.cancel()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        with anyio.move_on_after(THREAD_TIMEOUT):
            await anyio.to_thread.run_sync(self._thread.join, abandon_on_cancel=True)

    def _submit(self, factory: Callable[[], Awaitable[T]]) -> concurrent.futures.Future[T]:
        loop = self._loop
        if loop is None or loop.is_closed():
            raise ClusterError("the NATS thread is not running (the cluster has stopped)")

        async def job() -> T:
            return await factory()

        return asyncio.run_coroutine_threadsafe(job(), loop)

    async def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        future = self._submit(factory)
        done = anyio.Event()
        future.add_done_callback(lambda _: self.to_mesh(done.set))
        try:
            await done.wait()
        except BaseException:
            future.cancel()  # cancelled on our side: stop it on theirs too
            raise
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise ClusterError("the NATS thread stopped while an operation was running") from None

    async def send(
        self, factory: Callable[[], Awaitable[Any]], on_error: Callable[[Exception], None]
    ) -> None:
        loop, ready = self._loop, self._outbound_ready
        if loop is None or ready is None or loop.is_closed():
            on_error(ClusterError("the NATS thread is not running (the cluster has stopped)"))
            return
        self._outbound.append((factory, on_error))
        if not self._outbound_woken:
            self._outbound_woken = True
            try:
                loop.call_soon_threadsafe(ready.set)
            except RuntimeError:  # closed meanwhile
                on_error(ClusterError("the NATS thread stopped"))

    async def _send_queued(self, ready: asyncio.Event) -> None:
        """On the NATS loop: run what ``send`` queued, in order, a batch per wake-up."""
        queued = self._outbound
        while True:
            await ready.wait()
            ready.clear()
            self._outbound_woken = False
            while queued:
                factory, on_error = queued.popleft()
                try:
                    await factory()
                except Exception as exc:
                    self.to_mesh(on_error, exc)

    def spawn(self, factory: Callable[[], Coroutine[Any, Any, None]]) -> None:
        future = self._submit(factory)
        self._spawned.add(future)
        future.add_done_callback(self._spawned.discard)

    def to_mesh(self, function: Callable[..., None], *args: Any) -> None:
        import trio

        self._inbound.append((function, args))
        if self._inbound_woken:
            return  # trio has been woken for the queue and has not drained it yet
        self._inbound_woken = True
        # RunFinishedError: the mesh's loop has ended, and nobody is left to tell.
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._deliver_queued)

    def _deliver_queued(self) -> None:
        """On trio: everything ``to_mesh`` queued since the last wake-up, in order."""
        self._inbound_woken = False
        queued = self._inbound
        while queued:
            function, args = queued.popleft()
            _call_safely(function, *args)


def _call_safely(function: Callable[..., None], *args: Any) -> None:
    """Run a delivery callback; a bug in it is logged, never raised into either loop.

    (Raised from ``run_sync_soon`` it would end the whole trio run; raised into
    nats-py it would only reach its error callback.)
    """
    try:
        function(*args)
    except Exception:
        log.exception("cluster.callback_failed", callback=getattr(function, "__qualname__", "?"))


@asynccontextmanager
async def open_nats_loop() -> AsyncIterator[NatsLoop]:
    """The NATS loop for the mesh's current backend, for the ``async with``."""
    if sniffio.current_async_library() == "asyncio":
        async with open_task_group() as tg:
            yield _SameLoop(tg)
            tg.cancel_scope.cancel()
        return
    loop = _ThreadLoop()
    await loop.start()
    try:
        yield loop
    finally:
        with anyio.CancelScope(shield=True):
            await loop.stop()
