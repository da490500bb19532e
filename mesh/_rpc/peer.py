"""Drives a :class:`~mesh._rpc.session.Session` over a frame stream with anyio.

One task reads the connection (in :func:`serve_peer`, the serving task itself).
Frames leave from whoever queued them (``send_nowait``: no task switch) while the
stream takes them; a writer task starts only the first time it does not, and from
then on finishes whatever the stream could not take at once (every frame queued
while a write is in flight goes out in the next single write: pipelining needs
one writer, where a lock per send would serialise the callers). Deadlines and
heartbeats fire from a timer (``loop.call_at`` on asyncio, the same from one task
per run on trio: no task per link). Requests whose handler must wait get a
task each: on trio in the nursery :func:`open_peer` (or :func:`serve_peer`) owns,
in a cancel scope; on asyncio a task of the loop's own, cancelled directly, which
that same ``async with`` cancels and waits for on its way out. Nothing outlives it.
Neither goes through anyio's task group per call: its ``start_soon`` makes a task
handle (a cancel scope and an event) for every task, which was a fifth of a relayed
call's CPU on asyncio and a seventh on trio (docs/performance.md).

An idle link therefore holds one task on either loop, and a call
costs one wake-up of the caller (the backend's own future or parking, see
:mod:`transports._loop`), not an ``anyio.Event``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, Protocol, Unpack

import anyio
import anyio.abc
import msgspec

from mesh._errors import (
    AgentUnavailable,
    CallTimeout,
    ConnectionLost,
    ErrorCode,
    MeshError,
    MessageTooLarge,
    ProtocolError,
    Unauthorized,
    error_from_code,
)
from mesh._logging import get_logger
from mesh._rpc.asks import (
    ASK_METHOD,
    LOG_METHOD,
    AskHandlers,
    Elicited,
    Kind,
    Sampled,
    answer_ask,
    deliver_log,
    elicit_params,
    log_params,
    resolve_ask,
    sample_params,
)
from mesh._rpc.caller import CallMethods, CallOptions, ProgressCallback
from mesh._rpc.pending import MAX_CALL_DURATION
from mesh._rpc.session import (
    ROUTE_METHOD,
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
from mesh._telemetry.tracing import active as tracing_active
from mesh._telemetry.tracing import outgoing, server_identity, server_span, tool_of
from mesh.protocol import MESH_CODEC, Codec, RequestId
from transports import (
    FrameRejected,
    FrameStream,
    FrameTooLarge,
    TransportClosed,
    TransportInfo,
    unwrap_single_error,
)

# shared with the memory transport and the cluster
from transports._loop import Cancellable, Clock, Scope, Spawner, Tasks, Wakeup, current_loop

__all__ = ["Peer", "RequestContext", "RequestHandler", "open_peer", "serve_peer"]

log = get_logger("mesh.peer")

#: On close, queued frames (a ``cancelled``, a last response) get this long to leave.
FLUSH_ON_CLOSE: Final = 0.5
#: On close, handlers still running (cancelled) get this long to end (asyncio: see Spawner.wait).
STOP_HANDLERS_ON_CLOSE: Final = 5.0
#: A routed call waits this much beyond the target's deadline for the mesh's answer.
ROUTE_MARGIN: Final = 1.0
#: What a handler answers with most: never awaitable, so ``inspect.isawaitable`` (a
#: chain of ABC checks, about a microsecond) is skipped for them.
_PLAIN_RESULTS: Final = frozenset({dict, list, str, int, float, bool, type(None)})


#: Sends a request back to a request's sender over an exchange: (method, params, timeout).
CallBack = Callable[[str, Any, float | None], Awaitable[Any]]


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

    __slots__ = ("_call_back", "_pieces", "_session", "_wake", "method", "peer", "request_id")

    def __init__(
        self,
        session: Session,
        request_id: RequestId,
        method: str,
        *,
        peer: Peer | None,
        wake: Callable[[], None],
        call_back: CallBack | None = None,
    ) -> None:
        self._session = session
        self._wake = wake
        self._call_back = call_back
        self.peer = peer
        self.request_id = request_id
        self.method = method
        self._pieces = 0

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the caller we are alive (this also extends the call's deadline)."""
        self._session.report_progress(self.request_id, progress, total, message)
        self._wake()

    def report_artifact(self, name: str, piece: Any, *, last: bool = False) -> None:
        """Send the caller the next piece of the artifact ``name`` (a string is text, any
        other JSON value data), without waiting; ``last`` closes it, and a next piece of
        the same name opens a new one. It is a progress report (so it extends the call's
        deadline too) that carries the piece: an A2A client sees it as the artifact's next
        chunk, any other caller as progress whose message is a text piece."""
        self._pieces += 1
        chunk: dict[str, Any] = {"name": name, "last": last}
        chunk.update({"text": piece} if isinstance(piece, str) else {"data": piece})
        text = piece if isinstance(piece, str) else None
        self._session.report_progress(self.request_id, self._pieces, None, text, artifact=chunk)
        self._wake()

    async def call_agent(
        self,
        agent_id: str,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        **asks: Unpack[AskHandlers],
    ) -> Any:
        """Call another agent through the mesh that called us (``mesh/call``).

        The orchestrator forwards the call and its answer; ``timeout`` is carried
        along, and our own wait allows a little longer so the mesh's verdict
        (a timeout naming the target agent) arrives first. The target's logs and
        asks come back to ``on_log``, ``on_elicit`` and ``on_sample``.
        """
        if self.peer is None:
            raise AgentUnavailable("this request has no connection back to the mesh (HTTP)")
        route = {"agent": agent_id, "method": method, "params": params, "timeout": timeout}
        outer = None if timeout is None else timeout + ROUTE_MARGIN
        return await self.peer.call(ROUTE_METHOD, route, timeout=outer, **asks)

    def notify_nowait(self, method: str, params: Any = None) -> None:
        """Send the caller a notification without waiting (safe while cancelled)."""
        if not self._session.closed:
            self._session.send_notification(method, params)
            self._wake()

    # -- back to the caller, mid-call (mesh._rpc.asks) --

    def log(self, level: str, data: Any, *, logger: str | None = None) -> None:
        """Send the caller a log line (MCP's levels, ``debug`` to ``emergency``); no wait.

        A caller that passed no ``on_log`` drops it."""
        self.notify_nowait(LOG_METHOD, log_params(self.request_id, level, data, logger))

    def log_raw(self, params: Mapping[str, Any]) -> None:
        """Pass on a log line another handler sent (its level checked again)."""
        level, logger = params.get("level"), params.get("logger")
        self.log(
            level if isinstance(level, str) else "info",
            params.get("data"),
            logger=logger if isinstance(logger, str) else None,
        )

    async def elicit(self, message: str, schema: Mapping[str, Any]) -> Elicited:
        """Ask the caller for input shaped by ``schema`` (an object of primitive
        properties, as MCP's elicitation allows); the person may accept, decline or
        cancel. Bounded by the call's own deadline."""
        answer = await self.ask("elicit", elicit_params(message, schema))
        return msgspec.convert(answer, Elicited)

    async def sample(
        self,
        messages: str | Sequence[Any],
        *,
        max_tokens: int,
        system_prompt: str | None = None,
        temperature: float | None = None,
        stop_sequences: Sequence[str] | None = None,
        model_preferences: Mapping[str, Any] | None = None,
        include_context: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Sampled:
        """Ask the caller's model for a message (MCP's ``sampling/createMessage``);
        a string is one user message. Bounded by the call's own deadline."""
        params = sample_params(
            messages if isinstance(messages, str) else list(messages),
            max_tokens=max_tokens,
            system_prompt=system_prompt,
            temperature=temperature,
            stop_sequences=None if stop_sequences is None else list(stop_sequences),
            model_preferences=model_preferences,
            include_context=include_context,
            metadata=metadata,
        )
        return msgspec.convert(await self.ask("sample", params), Sampled)

    async def ask(self, kind: Kind, params: dict[str, Any]) -> Any:
        """Send one ``mesh/ask`` of ``kind`` for this call; its MCP-shaped answer.

        The ask waits as long as the call may last at most: the caller cancels the
        call at its own deadline, which cancels this handler and the ask with it.
        """
        ask = {"call": self.request_id, "kind": kind, "params": params}
        return await self.call_back(ASK_METHOD, ask, timeout=MAX_CALL_DURATION)

    async def call_back(self, method: str, params: Any = None, *, timeout: float | None) -> Any:
        """Send a request to whoever sent this one, on what carries this one: the link
        (a peer), or an exchange whose answer streams (an MCP SSE answer, which takes
        the reply in a later POST). Anything else has no way back, and says so."""
        if self.peer is not None:
            return await self.peer.call(method, params, timeout=timeout)
        if self._call_back is not None:
            return await self._call_back(method, params, timeout)
        raise AgentUnavailable(
            f"this request has no connection back to its caller (one HTTP exchange):"
            f" it cannot send {method!r}"
        )


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
        spans: bool = True,
    ) -> None:
        info = stream.info
        if config is None:
            config = SessionConfig(max_frame_size=stream.max_frame_size)
        loop = current_loop()
        self._now = loop.now
        self._wakeup = loop.wakeup
        self._stream = stream
        self._handler = handler
        #: False: the handler makes its requests' server spans itself (a router that
        #: names the call it routes, as the cluster's daemon links do).
        self._spans = spans
        self._session = Session(
            now=self._now(), config=config, codec=codec, agent=agent, transport=info.kind
        )
        self._call_timeout = config.call_timeout
        #: Each call in flight: the wake-up its caller parks on, set to its CallDone.
        self._waiters: dict[RequestId, Wakeup] = {}
        self._progress: dict[RequestId, ProgressCallback] = {}
        #: Each call in flight made with ask handlers (on_log, on_elicit, on_sample).
        self._asks_of: dict[RequestId, AskHandlers] = {}
        #: The peer's asks being answered, to the call and kind each is for (each one's
        #: id is in ``_handlers`` while it runs; the rest are dropped lazily).
        self._asking: dict[RequestId, tuple[str, str]] = {}
        #: What stops each request's handler still running: its scope, or its task.
        self._handlers: dict[RequestId, Cancellable] = {}
        #: The cancel scope of each notification's handler still running.
        self._notifying: set[Scope] | None = None  # made by the first one
        self._tasks: Tasks | None = None
        #: Cancelled when the link is lost for another reason than the reader's own.
        self._reader: Cancellable | None = None
        # A stream that can write without blocking lets callers send with no task
        # switch; the writer task only finishes what the transport could not take.
        self._send_nowait: Callable[[Sequence[bytes]], bool] = stream.send_nowait
        self._writer: Wakeup | None = None  # the writer task parks here (None: no writer yet)
        self._stream_behind = False  # send_nowait left frames in the stream
        #: Deadlines and heartbeats: the session says when it is next due.
        self._clock = Clock(loop, self._tick)
        self._ended = False
        self._ended_event: anyio.Event | None = None  # made by the first wait_closed
        self._call_ended: list[Wakeup] | None = None  # wait_calls_finished, parked
        self._delivering = False  # in _deliver: a frame arriving meanwhile goes to the reader
        self._new_scope = loop.cancel_scope
        self._task_group = loop.task_group
        #: The task group's ``start_soon`` returns a task handle: anyio's, on asyncio (the
        #: loop with tasks of its own; trio's nursery gives none back).
        self._handles = loop.create_task is not None
        #: A handler that must wait runs as a task: the loop's own on asyncio.
        self._spawner = Spawner(loop)
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
        **options: Unpack[CallOptions],
    ) -> Any:
        """Call ``method`` on the peer and return its result.

        Raises :class:`~mesh.CallTimeout` when the deadline passes (the peer is told
        ``cancelled``), :class:`~mesh.ConnectionLost` when the link dies first, and the
        matching :class:`~mesh.RemoteError` when the peer answers with an error.
        Cancelling the calling task also tells the peer ``cancelled``.
        """
        timeout, on_progress = options.get("timeout"), options.get("on_progress")
        now = self._now()
        rid = self._session.send_request(method, params, now=now, timeout=timeout, trace=outgoing())
        if "on_log" in options or "on_elicit" in options or "on_sample" in options:
            self._asks_of[rid] = options
            try:
                return await self._wait_answer(rid, now, timeout, on_progress)
            except CallTimeout as exc:
                self._say_what_waited(rid, exc)
                raise
            finally:
                del self._asks_of[rid]
        return await self._wait_answer(rid, now, timeout, on_progress)

    async def wait_handshake_answer(
        self, method: str, request_id: RequestId, *, timeout: float | None = None
    ) -> Any:
        """The answer to a call made in the connection's handshake (no frame sent here).

        Completes, times out and fails as :meth:`call` does; the deadline runs from now.
        """
        now = self._now()
        self._session.expect_response(method, request_id=request_id, now=now, timeout=timeout)
        return await self._wait_answer(request_id, now, timeout, None)

    async def _wait_answer(
        self,
        rid: RequestId,
        now: float,
        timeout: float | None,
        on_progress: ProgressCallback | None,
    ) -> Any:
        session = self._session
        waiter = self._waiters[rid] = self._wakeup()
        if on_progress is not None:
            self._progress[rid] = on_progress
        self._clock.arm(now + (self._call_timeout if timeout is None else timeout))
        self._wake_writer()
        try:
            done: CallDone = await waiter.wait()
        except BaseException:
            if self._waiters.pop(rid, None) is not None:
                if session.cancel_call(rid):
                    self._wake_writer()
                if self._call_ended:
                    self._wake_call_watchers()
            raise
        finally:
            if on_progress is not None:
                self._progress.pop(rid, None)
        if done.error is not None:
            raise done.error
        return done.result

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (no answer comes back)."""
        self.notify_nowait(method, params)

    def notify_nowait(self, method: str, params: Any = None) -> None:
        self._session.send_notification(method, params)
        self._wake_writer()

    @staticmethod
    def broadcast_nowait(peers: Iterable[Peer], method: str, params: Any = None) -> int:
        """Send one notification to every open peer in ``peers``; returns how many took it.

        The message is encoded once (per codec) rather than once per peer, and each
        link writes it at once where its transport can (WebSocket, stdio, memory):
        no task wakes for a link whose socket has room. Closed peers are skipped.
        """
        frames: dict[int, bytes] = {}
        sent = 0
        for peer in peers:
            session = peer._session
            if session.closed:
                continue
            codec = session.codec
            frame = frames.get(id(codec))
            if frame is None:
                frame = frames[id(codec)] = session.encode_notification(method, params)
            session.send_encoded(frame, method)
            peer._wake_writer()
            sent += 1
        return sent

    async def wait_calls_finished(self) -> None:
        """Until every call made on this peer so far has its outcome (bound it yourself)."""
        calls = set(self._waiters)
        while not calls.isdisjoint(self._waiters):
            parked = self._wakeup()
            if self._call_ended is None:
                self._call_ended = []
            self._call_ended.append(parked)
            try:
                await parked.wait()
            finally:  # a wake takes the whole list; a cancel leaves ours in it
                if self._call_ended is not None and parked in self._call_ended:
                    self._call_ended.remove(parked)

    def fail_pending(self, reason: str, which: Callable[[Any], bool] | None = None) -> int:
        """Fail every call in flight now (those whose params ``which`` picks, if given)
        with ``AgentUnavailable`` ``reason``; the link stays up.

        Returns how many failed. See :meth:`mesh._rpc.session.Session.fail_pending`.
        """
        events: list[Event] = [*self._session.fail_pending(reason, which)]
        if events:
            self._dispatch(events)
            self._wake_writer()  # the `cancelled` notifications
        return len(events)

    async def wait_closed(self) -> None:
        """Wait until the connection has ended, for whatever reason."""
        if self._ended:
            return
        if self._ended_event is None:
            self._ended_event = anyio.Event()
        await self._ended_event.wait()

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

    # -- the tasks -----------------------------------------------------------------------------

    def _start(self, tasks: Tasks, *, read: bool) -> None:
        """Run in ``tasks``: the reader; arm the clock.

        Without ``read`` the caller reads itself (:func:`serve_peer`), inside ``tasks``
        and nothing else: then losing the link cancels the whole group, reader and
        handlers at once, and the link needs no cancel scope of its own.
        """
        self._tasks = tasks
        if read:
            deliver_to = getattr(self._stream, "deliver_to", None)
            if deliver_to is not None:
                deliver_to(self._deliver)
            if self._handles:
                # anyio's task group (asyncio) hands back the task's handle, whose
                # cancel is that task's own scope's: no second scope for the reader.
                self._reader = tasks.start_soon(self._read_loop, name="mesh.reader")
            else:
                self._reader = scope = self._new_scope()
                tasks.start_soon(self._read_in_scope, scope, name="mesh.reader")
        else:
            self._reader = tasks.cancel_scope
        deadline = self._session.next_deadline()
        if deadline is not None:
            self._clock.arm(deadline)

    def _deliver(self, frame: bytes) -> bool:
        """A lone call's answer, handed over by the stream as it arrives (in the sender's
        task): the caller wakes from here, not from the reader task woken first, so a
        sequential call takes two loop iterations, not three. Anything else (calls that
        overlap, a frame with a method: requests and notifications run their handlers in
        the reader's task and context) is left to the reader.
        """
        if len(self._waiters) != 1 or self._delivering or b'"method"' in frame:
            return False
        self._delivering = True
        try:
            session = self._session
            events = session.receive_frame(frame, self._now())
            if events:
                self._dispatch(events)
            if session.has_data_to_send:
                self._wake_writer()
        finally:
            self._delivering = False
        return True

    async def _read_in_scope(self, scope: Scope) -> None:
        with scope:
            await self._read_loop()

    async def _read_loop(self) -> None:
        session = self._session
        receive = self._stream.receive
        dispatch = self._dispatch
        now = self._now
        while True:
            try:
                frame = await receive()
            except FrameTooLarge as exc:
                events = session.receive_oversized(exc.size, exc.head, now(), exc.tail)
            except FrameRejected as exc:
                events = session.outbound_rejected(exc.head, _rejection_error(exc))
            except TransportClosed as exc:
                self._lost(_lost_from(exc))
                return
            else:
                events = session.receive_frame(frame, now())
            if events:
                dispatch(events)
            if session.has_data_to_send:
                self._wake_writer()

    async def _write_loop(self) -> None:
        """Finish what the stream could not take at once; park until there is more."""
        session = self._session
        while not session.closed:
            self._stream_behind = False
            # Even with no new frames: send_many([]) finishes what send_nowait queued.
            frames = session.data_to_send()
            try:
                await self._stream.send_many(frames)
            except TransportClosed as exc:
                self._lost(_lost_from(exc))
                return
            if not self._stream_behind and not session.has_data_to_send:
                writer = self._writer = self._wakeup()
                await writer.wait()

    def _tick(self) -> float | None:
        """The clock's: fire what is due (deadlines, heartbeats, liveness); the next deadline."""
        try:
            return self._fire_due()
        except Exception as exc:  # a bug must end this link, not the event loop's callback
            log.exception("mesh.clock_failed", agent=self._session.agent)
            self._lost(ConnectionLost(f"internal error in the peer's clock: {exc!r}"))
            return None

    def _fire_due(self) -> float | None:
        session = self._session
        events = session.tick(self._now())
        if events:
            self._dispatch(events)
        error = session.close_error
        if error is not None:  # the peer went silent past its TTL
            self._lost(error)
            return None
        if session.has_data_to_send:
            self._wake_writer()
        return session.next_deadline()

    # -- events --------------------------------------------------------------------------------

    def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, CallDone):
                waiter = self._waiters.pop(event.id, None)
                if waiter is not None:
                    waiter.set(event)
                    if self._call_ended:
                        self._wake_call_watchers()
            elif isinstance(event, IncomingRequest):
                if event.method == ASK_METHOD:
                    self._answer_ask(event)
                else:
                    self._start_handler(event)
            elif isinstance(event, CancelRequested):
                running = self._handlers.get(event.id)
                if running is not None:
                    running.cancel()
            elif isinstance(event, ProgressReported):
                on_progress = self._progress.get(event.id)
                if on_progress is not None:
                    on_progress(event.params)
            elif event.method == LOG_METHOD:
                call = event.params.get("call") if isinstance(event.params, dict) else None
                own = self._asks_of.get(RequestId(call)) if isinstance(call, str) else None
                deliver_log(own, event.params)
            elif self._handler is not None and self._tasks is not None:
                self._start_notification(self._handler, self._tasks, event)

    def _forget_answered_asks(self) -> None:
        for answered in [rid for rid in self._asking if rid not in self._handlers]:
            del self._asking[answered]

    def _say_what_waited(self, call: RequestId, exc: CallTimeout) -> None:
        """A call that timed out while its ask waited for our answer says so: the
        deadline passed on a question nobody answered, not on the agent's work."""
        self._forget_answered_asks()
        kinds = {kind for of, kind in self._asking.values() if of == call}
        if kinds:
            what = " and ".join(
                "elicitation" if k == "elicit" else "sampling" for k in sorted(kinds)
            )
            exc.message += f"; the agent's {what} was still waiting for an answer"

    def _answer_ask(self, request: IncomingRequest) -> None:
        """A ``mesh/ask`` for one of our calls: its handler answers it in a task of its
        own (cancelled if the asker gives up), or it is refused at once, saying why."""
        self._forget_answered_asks()
        in_flight = {rid: self._asks_of.get(rid, {}) for rid in self._waiters}
        try:
            handler, kind, params = resolve_ask(request.params, in_flight, len(self._asking))
        except MeshError as exc:
            self._session.send_error(request.id, exc.code, exc.message, exc.data)
            return
        if self._tasks is None:
            return  # pragma: no cover - a call in flight means the peer runs
        self._asking[request.id] = (request.params["call"], kind)
        pending = answer_ask(handler, kind, params)
        self._handlers[request.id] = self._spawner.start(
            self._tasks, self._finish_handler, request, pending, name="mesh.ask"
        )

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
        pending = start_request(self._handler, ctx, self._session, request, spans=self._spans)
        if pending is None:
            return  # answered inline; the reader (or clock) sends what is queued
        self._handlers[request.id] = self._spawner.start(
            self._tasks, self._finish_handler, request, pending, name="mesh.handler"
        )

    async def _finish_handler(self, request: IncomingRequest, pending: Awaitable[Any]) -> None:
        # Cancelling it ends it here, unanswered (the caller gave up, or the link is gone).
        try:
            await finish_request(pending, self._session, request)
        finally:
            self._handlers.pop(request.id, None)
            self._wake_writer()

    async def _wait_served(self) -> None:
        """asyncio: wait for the handlers' own tasks, which :meth:`_lost` cancelled, to end."""
        running = await self._spawner.wait(list(self._handlers.values()), STOP_HANDLERS_ON_CLOSE)
        if running:  # a handler that swallowed its cancel: never hang a close on it
            log.warning("mesh.handlers_ignored_cancel", count=running)

    def _start_notification(
        self, handler: RequestHandler, tasks: Tasks, event: IncomingNotification
    ) -> None:
        try:
            pending = handler.handle_notification(self, event.method, event.params)
        except Exception as exc:
            _notification_failed(event, exc)
            return
        if pending is not None:
            tasks.start_soon(self._finish_notification, pending, event, name="mesh.notification")

    async def _finish_notification(
        self, pending: Awaitable[None], event: IncomingNotification
    ) -> None:
        scope = self._new_scope()
        if self._notifying is None:
            self._notifying = set()
        self._notifying.add(scope)
        try:
            with scope:
                await finish_notification(pending, event)
        finally:
            self._notifying.discard(scope)

    def _wake_call_watchers(self) -> None:
        watchers, self._call_ended = self._call_ended, None
        for parked in watchers or ():
            parked.set()

    def _wake_writer(self) -> None:
        """Send what the session queued: at once if the stream can, else via the writer task."""
        session = self._session
        if session.closed:
            return
        frames = session.data_to_send()
        if frames:
            try:
                if self._send_nowait(frames):
                    return
            except TransportClosed as exc:
                self._lost(_lost_from(exc))
                return
            self._stream_behind = True
        elif not self._stream_behind:
            return
        writer = self._writer
        if writer is not None:
            writer.set()
        elif self._tasks is not None:
            # The first time the stream could not take everything: from now on a
            # writer task finishes what send_nowait leaves.
            self._writer = self._wakeup()
            self._writer.set()
            self._tasks.start_soon(self._write_loop, name="mesh.writer")

    def _lost(self, error: ConnectionLost) -> None:
        """The link is gone: fail every waiter, stop every handler, stop the loops."""
        if self._ended:
            return
        self._ended = True
        self._dispatch(list(self._session.connection_lost(error)))
        for running in (*self._handlers.values(), *(self._notifying or ())):
            running.cancel()
        if self._ended_event is not None:
            self._ended_event.set()
        if self._writer is not None:
            self._writer.set()
        self._clock.stop()
        if self._reader is not None:
            self._reader.cancel()


def start_request(
    handler: RequestHandler,
    ctx: RequestContext,
    session: Session,
    request: IncomingRequest,
    *,
    spans: bool = True,
) -> Awaitable[Any] | None:
    """Call one request's handler: queue its answer if it has one now (None), else
    return the awaitable that will produce it (see :func:`finish_request`). Without
    ``spans`` the handler makes the request's server span itself."""
    if (
        spans
        and tracing_active()
        and (request.trace is not None or request.method not in _HOUSEKEEPING)
    ):
        return _start_traced(handler, ctx, session, request)
    try:
        result = handler.handle_request(ctx, request.method, request.params)
    except Exception as exc:
        _queue_failure(session, request, exc)
        return None
    if type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result):
        return result
    session.send_response(request.id, result)
    return None


#: Asked by the mesh itself (the handshake, liveness probes): no trace of their own
#: unless a caller's trace comes with them, or every probe would be a trace.
_HOUSEKEEPING: Final = frozenset({"agent/info", "ping"})


def _start_traced(
    handler: RequestHandler, ctx: RequestContext, session: Session, request: IncomingRequest
) -> Awaitable[Any] | None:
    """:func:`start_request` inside a SERVER span, child of the caller's (the handler's
    own spans, a tool's included, are its children)."""
    agent = getattr(handler, "id", None)  # an SDK Agent answering: it is the server
    address, identity = server_identity(agent if isinstance(agent, str) else None)
    served = server_span(
        request.method,
        request.trace,
        agent=address,
        attributes=identity,
        mcp_params=request.params if session.codec.name == "mcp" else None,
        tool=tool_of(request.method, request.params),
    )
    with served.current():
        try:
            result = handler.handle_request(ctx, request.method, request.params)
        except Exception as exc:
            served.finish(exc)
            _queue_failure(session, request, exc)
            return None
    if type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result):
        return served.wrap(result)
    served.finish()
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


@asynccontextmanager
async def open_peer(
    stream: FrameStream,
    *,
    handler: RequestHandler | None = None,
    config: SessionConfig | None = None,
    codec: Codec = MESH_CODEC,
    agent: str | None = None,
    spans: bool = True,
) -> AsyncIterator[Peer]:
    """Run a session over ``stream`` for the duration of the ``async with``.

    ``spans=False``: the handler makes its requests' server spans itself."""
    peer = Peer(stream, handler=handler, config=config, codec=codec, agent=agent, spans=spans)
    with unwrap_single_error():
        async with peer._task_group() as tg:
            peer._start(tg, read=True)
            try:
                yield peer
            finally:
                await peer.aclose()
                tg.cancel_scope.cancel()  # a writer parked for good, a handler still running
                await peer._wait_served()


async def serve_peer(
    stream: FrameStream,
    handler: RequestHandler,
    *,
    config: SessionConfig | None = None,
    codec: Codec = MESH_CODEC,
    handshake_request: tuple[RequestId, str] | None = None,
    on_start: Callable[[Peer], object] | None = None,
) -> None:
    """Serve ``handler`` on ``stream`` until the connection ends.

    The calling task reads the connection itself: one task fewer per link served.
    ``handshake_request`` is a request (id, method) the client made in the
    connection's handshake: it is answered first, as if its frame had come.
    ``on_start(peer)`` runs once the peer is up, before that answer and before
    the first frame is read.
    """
    peer = Peer(stream, handler=handler, config=config, codec=codec)
    with unwrap_single_error():
        async with peer._task_group() as tg:
            peer._start(tg, read=False)
            if on_start is not None:
                on_start(peer)
            if handshake_request is not None:
                peer._dispatch(peer._session.receive_request(*handshake_request))
                if peer._session.has_data_to_send:
                    peer._wake_writer()
            try:
                await peer._read_loop()
            finally:
                await peer.aclose()
                tg.cancel_scope.cancel()
                await peer._wait_served()
