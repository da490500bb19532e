"""Request/response transports (HTTP): one frame in, at most one frame out.

There is no connection to keep a session on, so each exchange gets a fresh
:class:`~mesh._rpc.session.Session` in its own right: the same decoding, validation,
error mapping and size limits as a persistent link, without the clock. A request
is answered with its response; an invalid frame with the error that names the
problem; a heartbeat with a heartbeat (proof of life for the caller's liveness
check); a notification with nothing (HTTP 204).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Final

import anyio

from mesh._errors import CallTimeout
from mesh._rpc.complaints import InputComplaints
from mesh._rpc.peer import RequestContext, RequestHandler, answer_request
from mesh._rpc.session import (
    CallDone,
    CancelRequested,
    IncomingNotification,
    IncomingRequest,
    Session,
    SessionConfig,
)
from mesh.protocol import MESH_CODEC, Codec, Heartbeat, RequestId, new_request_id, now_ms

__all__ = ["Exchange"]

_NO_CLOCK: Final = SessionConfig(heartbeat_interval=None)


def _no_wake() -> None:
    """Nothing to wake: the exchange returns its answer when the handler is done."""


class Exchange:
    """Answers single frames with a handler (an :class:`~mesh.Agent`, say)."""

    def __init__(
        self,
        handler: RequestHandler,
        *,
        config: SessionConfig | None = None,
        codec: Codec = MESH_CODEC,
        agent: str | None = None,
    ) -> None:
        self._handler = handler
        base = config or _NO_CLOCK
        self._config = SessionConfig(
            call_timeout=base.call_timeout,
            max_call_duration=base.max_call_duration,
            heartbeat_interval=None,
            max_frame_size=base.max_frame_size,
        )
        self._codec = codec
        self._agent = agent
        # One bad-input log for every exchange: a client that posts garbage in a loop
        # must not get one log line per request.
        self._complaints = InputComplaints()
        # Requests being handled, so a `cancelled` arriving in another exchange stops them.
        self._in_flight: dict[RequestId, anyio.CancelScope] = {}
        # Requests a handler sent its caller over a streamed answer, until their answer
        # arrives in an exchange of its own (:meth:`take_answer`).
        self._asked: dict[RequestId, _Asked] = {}

    async def answer(
        self, frame: bytes, *, on_notification: Callable[[bytes], None] | None = None
    ) -> tuple[bytes | None, bool]:
        """The frame to send back (None when nothing is owed), and whether ``frame`` was invalid.

        ``on_notification`` is handed each frame a handler sends before its answer
        (progress, notifications) as it is sent, for a reply that can stream them
        (MCP's SSE answer); without it they are dropped.

        An invalid frame is still answered with an error message naming the
        problem; HTTP sends that with a 4xx status.
        """
        session = Session(
            now=anyio.current_time(),
            config=self._config,
            codec=self._codec,
            agent=self._agent,
            transport="http",
            complaints=self._complaints,
        )
        events = session.receive_frame(frame, anyio.current_time())
        stats = session.statistics()
        if stats.heartbeats_received:
            return self._codec.encode(Heartbeat(id=new_request_id(), timestamp=now_ms())), False
        if stats.invalid_frames or stats.oversized_frames:
            frames = session.data_to_send()
            return (frames[-1] if frames else None), True
        for event in events:
            if isinstance(event, IncomingRequest):
                await self._run(session, event, on_notification)
            elif isinstance(event, CancelRequested):
                scope = self._in_flight.get(event.id)
                if scope is not None:
                    scope.cancel()
            elif isinstance(event, IncomingNotification):
                pending = self._handler.handle_notification(None, event.method, event.params)
                if pending is not None:
                    await pending
        frames = session.data_to_send()
        # Progress notifications cannot travel back over one HTTP reply; the
        # answer is always the last frame queued.
        return (frames[-1] if frames else None), False

    async def _run(
        self,
        session: Session,
        request: IncomingRequest,
        on_notification: Callable[[bytes], None] | None,
    ) -> None:
        wake = _no_wake
        if on_notification is not None:
            forward = on_notification

            def wake() -> None:  # a handler sent something: pass it on now
                for sent in session.data_to_send():
                    forward(sent)

        call_back = None if on_notification is None else partial(self._call_back, session, wake)
        ctx = RequestContext(
            session, request.id, request.method, peer=None, wake=wake, call_back=call_back
        )
        scope = anyio.CancelScope()
        self._in_flight[request.id] = scope
        try:
            with scope:
                await answer_request(self._handler, ctx, session, request)
        finally:
            self._in_flight.pop(request.id, None)

    def take_answer(self, key: str, frame: bytes) -> bool:
        """``frame`` answers a request a handler sent its caller (see :meth:`_call_back`):
        hand it over and say True; False when no request of that id waits (it ended)."""
        asked = self._asked.get(RequestId(key))
        if asked is None:
            return False
        for event in asked.session.receive_frame(frame, anyio.current_time()):
            if isinstance(event, CallDone) and event.id == key:
                asked.done = event
                asked.arrived.set()
        return True

    async def _call_back(
        self,
        session: Session,
        wake: Callable[[], None],
        method: str,
        params: Any,
        timeout: float | None,
    ) -> Any:
        """A request to the caller, sent on the streamed answer; its reply comes in
        another exchange. Bounded by ``timeout``; cancelled, it tells the caller so."""
        timeout = self._config.call_timeout if timeout is None else timeout
        rid = session.send_request(method, params, now=anyio.current_time(), timeout=timeout)
        asked = self._asked[rid] = _Asked(session)
        wake()
        try:
            with anyio.move_on_after(timeout):
                await asked.arrived.wait()
        finally:
            del self._asked[rid]
            if asked.done is None and session.cancel_call(rid, reason="no longer waited for"):
                wake()
        if asked.done is None:
            raise CallTimeout(f"no answer to {method!r} from the caller within {timeout:g} s")
        if asked.done.error is not None:
            raise asked.done.error
        return asked.done.result


class _Asked:
    """One request to the caller, waiting for its answer."""

    __slots__ = ("arrived", "done", "session")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.arrived = anyio.Event()
        self.done: CallDone | None = None
