"""Drives a :class:`~mesh._rpc.session.Session` over a frame stream with anyio.

Three background tasks own the connection — a reader, one writer (every frame
queued while a write is in flight goes out in the next single write: pipelining
needs one writer, PERFORMANCE.md lesson 2) and a clock that fires deadlines and
heartbeats — plus one task per incoming request. They all live in a task group
that :func:`open_peer` owns; nothing outlives its ``async with``.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, Protocol

import anyio
import anyio.abc
import sniffio

from mesh._errors import (
    AgentUnavailable,
    ConnectionLost,
    ErrorCode,
    MeshError,
    MessageTooLarge,
    ProtocolError,
    Unauthorized,
    error_from_code,
)
from mesh._logging import get_logger
from mesh._rpc.caller import CallMethods, ProgressCallback
from mesh._rpc.session import (
    CallDone,
    CancelRequested,
    Event,
    IncomingNotification,
    IncomingRequest,
    ProgressReported,
    Session,
    SessionConfig,
    SessionStatistics,
    link_lost,
)
from mesh.protocol import MESH_CODEC, Codec, RequestId
from transports import (
    FrameRejected,
    FrameStream,
    FrameTooLarge,
    TransportClosed,
    TransportInfo,
    unwrap_single_error,
)

__all__ = ["Peer", "RequestContext", "RequestHandler", "open_peer", "serve_peer"]

log = get_logger("mesh.peer")

#: On close, queued frames (a ``cancelled``, a last response) get this long to leave.
FLUSH_ON_CLOSE: Final = 0.5
#: A routed call waits this much beyond the target's deadline for the mesh's answer.
ROUTE_MARGIN: Final = 1.0


class RequestHandler(Protocol):
    """What serves a peer's requests; :class:`mesh.Agent` is one.

    ``handle_request`` is called on the connection's reader and returns either the
    answer itself or an awaitable of it (an ``async def`` returns a coroutine): a
    plain answer is queued at once, with no task; an awaitable runs in a task of
    its own, cancellable by the caller. So a handler that need not wait should not.
    """

    def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any: ...

    def handle_notification(
        self, peer: Peer | None, method: str, params: Any
    ) -> Awaitable[None] | None:
        """Called on the reader too: a plain ``def`` handles it there, an ``async def``
        (or any awaitable returned) in a task of its own."""


class RequestContext:
    """Handed to a request's handler: who asked, and a way to report progress.

    ``peer`` is the connection the request came on, so a handler can call back;
    it is None over HTTP, where each request is its own exchange.
    """

    __slots__ = ("_session", "_wake", "method", "peer", "request_id")

    def __init__(
        self,
        session: Session,
        request_id: RequestId,
        method: str,
        *,
        peer: Peer | None,
        wake: Callable[[], None],
    ) -> None:
        self._session = session
        self._wake = wake
        self.peer = peer
        self.request_id = request_id
        self.method = method

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the caller we are alive (this also extends the call's deadline)."""
        self._session.report_progress(self.request_id, progress, total, message)
        self._wake()

    async def call_agent(
        self, agent_id: str, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Call another agent through the mesh that called us (``mesh/call``).

        The orchestrator forwards the call and its answer; ``timeout`` is carried
        along, and our own wait allows a little longer so the mesh's verdict
        (a timeout naming the target agent) arrives first.
        """
        if self.peer is None:
            raise AgentUnavailable("this request has no connection back to the mesh (HTTP)")
        route = {"agent": agent_id, "method": method, "params": params, "timeout": timeout}
        outer = None if timeout is None else timeout + ROUTE_MARGIN
        return await self.peer.call("mesh/call", route, timeout=outer)

    def notify_nowait(self, method: str, params: Any = None) -> None:
        """Send the caller a notification without waiting (safe while cancelled)."""
        if not self._session.closed:
            self._session.send_notification(method, params)
            self._wake()


class _Waiter:
    __slots__ = ("error", "event", "on_progress", "result")

    def __init__(self, event: anyio.Event, on_progress: ProgressCallback | None) -> None:
        self.event = event
        self.result: Any = None
        self.error: MeshError | None = None
        self.on_progress = on_progress


class Peer(CallMethods):
    """One live connection: call the other side, and serve its calls if given a handler.

    A :class:`~mesh.Caller`: ``call_tool``, ``list_tools`` and ``ping`` are built on ``call``.
    """

    def __init__(
        self,
        stream: FrameStream,
        *,
        handler: RequestHandler | None = None,
        config: SessionConfig | None = None,
        codec: Codec = MESH_CODEC,
        agent: str | None = None,
    ) -> None:
        info = stream.info
        if config is None:
            config = SessionConfig(max_frame_size=stream.max_frame_size)
        self._stream = stream
        self._handler = handler
        self._session = Session(
            now=anyio.current_time(), config=config, codec=codec, agent=agent, transport=info.kind
        )
        self._waiters: dict[RequestId, _Waiter] = {}
        self._handlers: dict[RequestId, anyio.CancelScope] = {}
        self._send_wakeup = anyio.Event()
        self._clock_wakeup = anyio.Event()
        self._clock_target = math.inf
        self._closed = anyio.Event()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._background = anyio.CancelScope()
        # A stream that can write without blocking lets callers send with no task
        # switch; the writer task only finishes what the transport could not take.
        self._send_nowait: Callable[[Sequence[bytes]], bool] = stream.send_nowait
        self._now, self._new_event, self._new_scope = _loop_factories()
        #: What the peer said of itself in the handshake (``agent/info``), if any.
        self.remote_info: dict[str, Any] = {}

    # -- what callers use --------------------------------------------------------------------

    @property
    def info(self) -> TransportInfo:
        return self._stream.info

    @property
    def stream(self) -> FrameStream:
        """The transport stream underneath (e.g. a stdio stream's ``pid``)."""
        return self._stream

    @property
    def agent(self) -> str | None:
        return self._session.agent

    @property
    def connected(self) -> bool:
        """True while the link is up (a peer never reconnects: then ``closed`` for good)."""
        return not self._session.closed

    @property
    def closed(self) -> bool:
        return self._session.closed

    @property
    def close_error(self) -> ConnectionLost | None:
        return self._session.close_error

    def statistics(self) -> SessionStatistics:
        return self._session.statistics()

    async def call(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Any:
        """Call ``method`` on the peer and return its result.

        Raises :class:`~mesh.CallTimeout` when the deadline passes (the peer is told
        ``cancelled``), :class:`~mesh.ConnectionLost` when the link dies first, and the
        matching :class:`~mesh.RemoteError` when the peer answers with an error.
        Cancelling the calling task also tells the peer ``cancelled``.
        """
        session = self._session
        rid = session.send_request(method, params, now=self._now(), timeout=timeout)
        waiter = _Waiter(self._new_event(), on_progress)
        self._waiters[rid] = waiter
        self._wake_writer()
        deadline = session.deadline_of(rid)
        if deadline is not None and deadline < self._clock_target:
            self._clock_wakeup.set()
        try:
            await waiter.event.wait()
        except BaseException:
            if self._waiters.pop(rid, None) is not None and session.cancel_call(rid):
                self._wake_writer()
            raise
        if waiter.error is not None:
            raise waiter.error
        return waiter.result

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer comes back)."""
        self.notify_nowait(method, params)

    def notify_nowait(self, method: str, params: Any = None) -> None:
        self._session.send_notification(method, params)
        self._wake_writer()

    async def wait_calls_finished(self) -> None:
        """Until every call made on this peer so far has its outcome (bound it yourself)."""
        for waiter in list(self._waiters.values()):
            await waiter.event.wait()

    def fail_pending(self, reason: str) -> int:
        """Fail every call in flight now (``AgentUnavailable`` ``reason``); the link stays up.

        Returns how many failed. See :meth:`mesh._rpc.session.Session.fail_pending`.
        """
        events: list[Event] = [*self._session.fail_pending(reason)]
        if events:
            self._dispatch(events)
            self._wake_writer()  # the `cancelled` notifications
        return len(events)

    async def wait_closed(self) -> None:
        """Wait until the connection has ended, for whatever reason."""
        await self._closed.wait()

    async def aclose(self, reason: str = "closed locally") -> None:
        """Flush what is queued (bounded), fail what is pending, close the stream."""
        with anyio.CancelScope(shield=True):
            if not self._session.closed:
                # Even with no new frames: send_many([]) finishes what send_nowait queued
                # in the transport (an answer the writer task had no turn to send).
                frames = self._session.data_to_send()
                with anyio.move_on_after(FLUSH_ON_CLOSE), suppress(TransportClosed):
                    await self._stream.send_many(frames)
                self._lost(ConnectionLost(reason))
            await self._stream.aclose()

    # -- the background tasks ----------------------------------------------------------------

    async def _run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        with self._background:
            async with anyio.create_task_group() as tg:
                self._tasks = tg
                tg.start_soon(self._read_loop)
                tg.start_soon(self._write_loop)
                tg.start_soon(self._clock_loop)
                task_status.started()

    async def _read_loop(self) -> None:
        session = self._session
        receive = self._stream.receive
        dispatch = self._dispatch
        while True:
            try:
                frame = await receive()
            except FrameTooLarge as exc:
                events = session.receive_oversized(exc.size, exc.head, self._now())
            except FrameRejected as exc:
                events = session.outbound_rejected(exc.head, _rejection_error(exc))
            except TransportClosed as exc:
                self._lost(_lost_from(exc))
                return
            else:
                events = session.receive_frame(frame, self._now())
            if events:
                dispatch(events)
            if session.has_data_to_send:
                self._wake_writer()

    async def _write_loop(self) -> None:
        session = self._session
        while not session.closed:
            await self._send_wakeup.wait()
            self._send_wakeup = self._new_event()
            # Even with no new frames: send_many([]) finishes what send_nowait queued.
            frames = session.data_to_send()
            try:
                await self._stream.send_many(frames)
            except TransportClosed as exc:
                self._lost(_lost_from(exc))
                return

    async def _clock_loop(self) -> None:
        session = self._session
        while not session.closed:
            deadline = session.next_deadline()
            self._clock_target = math.inf if deadline is None else deadline
            with anyio.CancelScope(deadline=self._clock_target):
                await self._clock_wakeup.wait()
            self._clock_wakeup = self._new_event()
            events = session.tick(anyio.current_time())
            if events:
                self._dispatch(events)
            error = session.close_error
            if error is not None:  # the peer went silent past its TTL
                self._lost(error)
                return
            if session.has_data_to_send:
                self._wake_writer()

    # -- events --------------------------------------------------------------------------------

    def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, CallDone):
                self._complete(event)
            elif isinstance(event, IncomingRequest):
                self._start_handler(event)
            elif isinstance(event, CancelRequested):
                scope = self._handlers.get(event.id)
                if scope is not None:
                    scope.cancel()
            elif isinstance(event, ProgressReported):
                waiter = self._waiters.get(event.id)
                if waiter is not None and waiter.on_progress is not None:
                    waiter.on_progress(event.params)
            elif self._handler is not None and self._tasks is not None:
                self._start_notification(self._handler, self._tasks, event)

    def _complete(self, done: CallDone) -> None:
        waiter = self._waiters.pop(done.id, None)
        if waiter is not None:
            waiter.result = done.result
            waiter.error = done.error
            waiter.event.set()

    def _start_handler(self, request: IncomingRequest) -> None:
        if self._handler is None or self._tasks is None:
            self._session.send_error(
                request.id,
                ErrorCode.METHOD_NOT_FOUND,
                f"this peer serves no methods ({request.method!r})",
            )
            return
        ctx = RequestContext(
            self._session, request.id, request.method, peer=self, wake=self._wake_writer
        )
        pending = start_request(self._handler, ctx, self._session, request)
        if pending is None:
            return  # answered inline; the reader (or clock) sends what is queued
        scope = self._new_scope()
        self._handlers[request.id] = scope
        self._tasks.start_soon(self._finish_handler, request, pending, scope, name="mesh.handler")

    async def _finish_handler(
        self, request: IncomingRequest, pending: Awaitable[Any], scope: anyio.CancelScope
    ) -> None:
        try:
            with scope:
                await finish_request(pending, self._session, request)
        finally:
            self._handlers.pop(request.id, None)
            self._wake_writer()

    def _start_notification(
        self, handler: RequestHandler, tasks: anyio.abc.TaskGroup, event: IncomingNotification
    ) -> None:
        try:
            pending = handler.handle_notification(self, event.method, event.params)
        except Exception as exc:
            _notification_failed(event, exc)
            return
        if pending is not None:
            tasks.start_soon(finish_notification, pending, event, name="mesh.notification")

    def _wake_writer(self) -> None:
        """Send what the session queued: at once if the stream can, else via the writer task."""
        send_nowait = self._send_nowait
        if not self._session.closed:
            frames = self._session.data_to_send()
            if not frames:
                return
            try:
                if send_nowait(frames):
                    return
            except TransportClosed as exc:
                self._lost(_lost_from(exc))
                return
        self._send_wakeup.set()

    def _lost(self, error: ConnectionLost) -> None:
        """The link is gone: fail every waiter, stop every handler, stop the loops."""
        if self._closed.is_set():
            return
        self._dispatch(list(self._session.connection_lost(error)))
        for scope in self._handlers.values():
            scope.cancel()
        self._closed.set()
        self._send_wakeup.set()
        self._clock_wakeup.set()
        self._background.cancel()


def start_request(
    handler: RequestHandler, ctx: RequestContext, session: Session, request: IncomingRequest
) -> Awaitable[Any] | None:
    """Call one request's handler: queue its answer if it has one now (None), else
    return the awaitable that will produce it (see :func:`finish_request`)."""
    try:
        result = handler.handle_request(ctx, request.method, request.params)
    except Exception as exc:
        _queue_failure(session, request, exc)
        return None
    if inspect.isawaitable(result):
        return result
    session.send_response(request.id, result)
    return None


async def finish_request(
    pending: Awaitable[Any], session: Session, request: IncomingRequest
) -> None:
    """Await what :func:`start_request` handed back and queue the answer."""
    try:
        result = await pending
    except Exception as exc:
        _queue_failure(session, request, exc)
    else:
        session.send_response(request.id, result)


async def answer_request(
    handler: RequestHandler, ctx: RequestContext, session: Session, request: IncomingRequest
) -> None:
    """Run one request's handler to the end and queue its answer (a result or a mapped error)."""
    pending = start_request(handler, ctx, session, request)
    if pending is not None:
        await finish_request(pending, session, request)


async def finish_notification(pending: Awaitable[None], event: IncomingNotification) -> None:
    """Await a notification handler's awaitable; a failure is logged (nobody is told)."""
    try:
        await pending
    except Exception as exc:
        _notification_failed(event, exc)


def _notification_failed(event: IncomingNotification, exc: Exception) -> None:
    log.error("mesh.notification_handler_crashed", method=event.method, exc_info=exc)


def _queue_failure(session: Session, request: IncomingRequest, exc: Exception) -> None:
    if isinstance(exc, MeshError):
        # str(), not .message: an error forwarded from another agent keeps naming
        # where it happened (agent, method, transport) as it crosses each hop.
        session.send_error(request.id, exc.code, str(exc), exc.data)
        return
    log.error("mesh.handler_crashed", method=request.method, request_id=request.id, exc_info=exc)
    session.send_error(request.id, ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")


def _rejection_error(exc: FrameRejected) -> MeshError:
    if exc.status in (401, 403):
        return Unauthorized(f"rejected with HTTP {exc.status}: {exc.message}")
    if exc.status == 413:
        return MessageTooLarge(f"rejected with HTTP 413: {exc.message}")
    if exc.status == 400:
        return ProtocolError(f"rejected with HTTP 400: {exc.message}")
    return error_from_code(
        ErrorCode.INTERNAL_ERROR, f"rejected with HTTP {exc.status}: {exc.message}"
    )


def _lost_from(exc: TransportClosed) -> ConnectionLost:
    return link_lost(exc.describe(), exc)


def _loop_factories() -> tuple[
    Callable[[], float], Callable[[], anyio.Event], Callable[[], anyio.CancelScope]
]:
    """The running loop's clock, and its own ``Event`` and ``CancelScope`` classes.

    ``anyio.current_time()``, ``anyio.Event()`` and ``anyio.CancelScope()`` look the
    backend up on every call (sniffio, then a dict): about a microsecond each, a
    measurable share of one call. So look it up once: the clock is the loop's own
    (what ``anyio.current_time`` returns), and an instance's type is the backend's
    class, which builds the next one directly.
    """
    if sniffio.current_async_library() == "trio":
        import trio

        clock: Callable[[], float] = trio.current_time
    else:
        clock = asyncio.get_running_loop().time
    return clock, type(anyio.Event()), type(anyio.CancelScope())


@asynccontextmanager
async def open_peer(
    stream: FrameStream,
    *,
    handler: RequestHandler | None = None,
    config: SessionConfig | None = None,
    codec: Codec = MESH_CODEC,
    agent: str | None = None,
) -> AsyncIterator[Peer]:
    """Run a session over ``stream`` for the duration of the ``async with``."""
    peer = Peer(stream, handler=handler, config=config, codec=codec, agent=agent)
    with unwrap_single_error():
        async with anyio.create_task_group() as tg:
            await tg.start(peer._run)
            try:
                yield peer
            finally:
                await peer.aclose()


async def serve_peer(
    stream: FrameStream,
    handler: RequestHandler,
    *,
    config: SessionConfig | None = None,
    codec: Codec = MESH_CODEC,
) -> None:
    """Serve ``handler`` on ``stream`` until the connection ends."""
    async with open_peer(stream, handler=handler, config=config, codec=codec) as peer:
        await peer.wait_closed()
