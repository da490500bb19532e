"""The RPC session: a sans-I/O state machine for one connection.

Feed it frames and the current time; it tells you which frames to send, which
calls completed, which requests arrived, which deadlines passed. It owns no
socket, task or clock, so it is tested with none (``tests/unit/test_session.py``),
and :mod:`mesh._rpc.peer` drives it over any :class:`transports.FrameStream`.

Both sides of a link are the same kind of object: each may call and each may
answer. Calls are correlated by id and may complete in any order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from mesh._errors import (
    AgentUnavailable,
    CallTimeout,
    ConnectionLost,
    ErrorCode,
    MeshError,
    MessageTooLarge,
    ProtocolError,
    error_from_code,
)
from mesh._logging import get_logger
from mesh._rpc.complaints import InputComplaints
from mesh._rpc.pending import DEFAULT_CALL_TIMEOUT, MAX_CALL_DURATION, PendingCall, PendingCalls
from mesh._telemetry.metrics import METRICS
from mesh.protocol import (
    ASK_HEARTBEAT,
    MESH_CODEC,
    Codec,
    DecodeFailure,
    ErrorInfo,
    Heartbeat,
    HeartbeatPayload,
    Notification,
    NotificationPayload,
    Request,
    RequestId,
    RequestPayload,
    Response,
    ResponsePayload,
    new_request_id,
    now_ms,
    salvage_id,
)
from transports import DEFAULT_MAX_FRAME_SIZE

__all__ = [
    "CallDone",
    "CancelRequested",
    "Event",
    "IncomingNotification",
    "IncomingRequest",
    "ProgressReported",
    "Session",
    "SessionConfig",
    "SessionStatistics",
    "link_lost",
    "no_response_within",
]

log = get_logger("mesh.session")
#: Frames and bytes in and out, for every session of the process (``/metrics``).
_WIRE: Final = METRICS.wire

#: Method names the session itself understands (the mesh protocol's, which MCP spells alike).
CANCELLED: Final = "cancelled"
PROGRESS: Final = "progress"
#: A call routed through the mesh: its answer is the router's verdict on the target's
#: link, so a timeout or a lost link in it is this side's own kind (see mesh._errors).
ROUTE_METHOD: Final = "mesh/call"
#: A link's requests served at once by default: far past what a client keeps in flight
#: (the bench's heaviest case is 64), low enough that one link cannot hold a process.
DEFAULT_MAX_REQUESTS_IN_PROGRESS: Final = 1024


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Per-connection settings; every number has a reason."""

    #: A call's deadline unless the caller says otherwise: long enough for a
    #: slow tool, short enough that a wedged agent is noticed within a minute.
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    #: ``progress`` may push a deadline out, but never past this many seconds
    #: after the call started, so a chatty but stuck handler still ends.
    max_call_duration: float = MAX_CALL_DURATION
    #: Send a heartbeat this often. ``None`` turns heartbeats and liveness off
    #: (request/response transports such as HTTP have no idle link to watch).
    heartbeat_interval: float | None = 10.0
    #: Declare the peer dead after this long without any frame; default 3 x interval.
    #: After construction it is ``None`` exactly when heartbeats are off.
    heartbeat_ttl: float | None = None
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: The peer's requests served at once, at most: each holds a task until it is
    #: answered, and one that never ends (a subscription) would otherwise let a single
    #: link hold any number. Past it a request is refused at once (UNAVAILABLE).
    max_requests_in_progress: int = DEFAULT_MAX_REQUESTS_IN_PROGRESS

    def __post_init__(self) -> None:
        if self.heartbeat_interval is None:
            object.__setattr__(self, "heartbeat_ttl", None)
        elif self.heartbeat_ttl is None:
            object.__setattr__(self, "heartbeat_ttl", 3 * self.heartbeat_interval)


# -- events the session reports -------------------------------------------------------


@dataclass(slots=True)
class CallDone:
    """A call of ours ended: with ``result`` if ``error`` is None."""

    id: RequestId
    result: Any = None
    error: MeshError | None = None


@dataclass(slots=True)
class ProgressReported:
    id: RequestId
    params: Mapping[str, Any]


@dataclass(slots=True)
class IncomingRequest:
    id: RequestId
    method: str
    params: Any
    #: The caller's span, (traceparent, tracestate), when the caller traces.
    trace: tuple[str, str | None] | None = None


@dataclass(slots=True)
class IncomingNotification:
    method: str
    params: Any


@dataclass(slots=True)
class CancelRequested:
    """The peer cancelled a request it sent us; stop its handler."""

    id: RequestId
    reason: str


Event = CallDone | ProgressReported | IncomingRequest | IncomingNotification | CancelRequested


@dataclass(slots=True)
class SessionStatistics:
    calls_started: int = 0
    calls_succeeded: int = 0
    calls_failed: int = 0
    calls_timed_out: int = 0
    calls_in_flight: int = 0
    requests_received: int = 0
    requests_in_progress: int = 0
    notifications_received: int = 0
    heartbeats_sent: int = 0
    heartbeats_received: int = 0
    invalid_frames: int = 0
    oversized_frames: int = 0
    late_responses: int = 0


@dataclass(slots=True)
class _Call:
    """What the session keeps of a call in flight, to describe it in errors."""

    method: str
    params: Any

    @property
    def what(self) -> str:
        """For errors: the method, plus the tool's name for tools/call (worked out only then)."""
        return _describe(self.method, self.params)


@dataclass(slots=True)
class _Label:
    agent: str | None
    transport: str


class Session:
    """One connection's RPC state. Not thread-safe; one driver owns it."""

    def __init__(
        self,
        *,
        now: float,
        config: SessionConfig | None = None,
        codec: Codec = MESH_CODEC,
        agent: str | None = None,
        transport: str = "memory",
        complaints: InputComplaints | None = None,
    ) -> None:
        self.config = config or SessionConfig()
        #: Bad input is answered every time but logged sparingly (see InputComplaints).
        self._complaints = complaints or InputComplaints()
        self._codec = codec
        self._label = _Label(agent, transport)
        self._outbox: list[bytes] = []
        self._calls: PendingCalls[RequestId, _Call] = PendingCalls(
            max_duration=self.config.max_call_duration
        )
        self._incoming: dict[RequestId, str] = {}
        self._stats = SessionStatistics()
        self._last_received = now
        interval = self.config.heartbeat_interval
        self._next_heartbeat = None if interval is None else now + interval
        self._close_error: ConnectionLost | None = None
        self._frame_limit = self.config.max_frame_size
        self._call_timeout = self.config.call_timeout

    # -- identity and state ------------------------------------------------------------

    @property
    def agent(self) -> str | None:
        return self._label.agent

    @agent.setter
    def agent(self, value: str | None) -> None:
        self._label.agent = value

    @property
    def transport(self) -> str:
        return self._label.transport

    @property
    def closed(self) -> bool:
        return self._close_error is not None

    @property
    def close_error(self) -> ConnectionLost | None:
        return self._close_error

    def statistics(self) -> SessionStatistics:
        return dataclasses.replace(
            self._stats,
            calls_in_flight=len(self._calls),
            requests_in_progress=len(self._incoming),
        )

    def data_to_send(self) -> list[bytes]:
        """Frames to write, in order; the session forgets them."""
        out, self._outbox = self._outbox, []
        if out:
            wire = _WIRE
            wire[2] += len(out)
            wire[3] += sum(map(len, out))
        return out

    @property
    def has_data_to_send(self) -> bool:
        return bool(self._outbox)

    # -- our calls -----------------------------------------------------------------------

    def send_request(
        self,
        method: str,
        params: Any = None,
        *,
        now: float,
        timeout: float | None = None,
        request_id: RequestId | None = None,
        trace: tuple[str, str | None] | None = None,
    ) -> RequestId:
        """Queue a request; returns its id. Raises if closed or the frame is too large.

        ``trace`` is the caller's span as (traceparent, tracestate), carried in the message.
        """
        if self._close_error is not None:
            raise self._lost(method)
        rid = request_id or new_request_id()
        payload = RequestPayload(method=method, params=params)
        if trace is None:
            request = Request(id=rid, timestamp=now_ms(), payload=payload)
        else:
            request = Request(
                id=rid,
                timestamp=now_ms(),
                payload=payload,
                traceparent=trace[0],
                tracestate=trace[1],
            )
        frame = self._codec.encode(request)
        if len(frame) > self._frame_limit:
            raise self._too_large(len(frame), _describe(method, params))
        if timeout is None:
            timeout = self._call_timeout
        self._calls.start(rid, _Call(method, params), now=now, timeout=timeout)
        self._stats.calls_started += 1
        self._outbox.append(frame)
        return rid

    def expect_response(
        self, method: str, *, request_id: RequestId, now: float, timeout: float | None = None
    ) -> None:
        """Hold a call the handshake already made (its request went with the connection's
        opening): its answer completes it like any other's, its deadline runs from ``now``."""
        if self._close_error is not None:
            raise self._lost(method)
        self._calls.start(
            request_id,
            _Call(method, None),
            now=now,
            timeout=self._call_timeout if timeout is None else timeout,
        )
        self._stats.calls_started += 1

    def receive_request(self, request_id: RequestId, method: str) -> list[Event]:
        """A request the peer made in the connection's handshake (no frame of its own)."""
        return self._handle_request(
            Request(id=request_id, timestamp=now_ms(), payload=RequestPayload(method=method))
        )

    def cancel_call(self, request_id: RequestId, *, reason: str = "cancelled by caller") -> bool:
        """Forget a call of ours and tell the peer; False if it had already ended."""
        if self._calls.abandon(request_id) is None:
            return False
        self._stats.calls_failed += 1
        if not self.closed:
            self._notify(CANCELLED, {"id": request_id, "reason": reason})
        return True

    def fail_pending(
        self, reason: str, which: Callable[[Any], bool] | None = None
    ) -> list[CallDone]:
        """Fail every call of ours now (those whose params ``which`` picks, if given)
        with :class:`~mesh.AgentUnavailable` ``reason``.

        For when the peer is known to be gone although the link is not (the registry
        heard no heartbeat for its TTL): waiting out each call's own deadline would
        only hide that. The peer is told ``cancelled`` for each, and the link stays
        up, so a peer that was only frozen is usable again when it thaws. A link that
        carries calls to many agents (another daemon's) fails those of one agent.
        """
        events: list[CallDone] = []

        def picked(call: PendingCall[RequestId, _Call]) -> bool:
            return which is None or which(call.info.params)

        for call in self._calls.lose(None if which is None else picked):
            error = self._error(AgentUnavailable, reason, call)
            events.append(CallDone(call.key, error=error))
            if not self.closed:
                self._notify(CANCELLED, {"id": call.key, "reason": reason})
        self._stats.calls_failed += len(events)
        return events

    def send_notification(self, method: str, params: Any = None) -> None:
        self._raise_if_closed(method)
        self._notify(method, params, checked=True)

    def encode_notification(self, method: str, params: Any = None) -> bytes:
        """A notification's frame, for :meth:`send_encoded` on many sessions (encoded once)."""
        message = Notification(
            id=new_request_id(),
            timestamp=now_ms(),
            payload=NotificationPayload(method=method, params=params),
        )
        return self._encode_checked(message, method)

    def send_encoded(self, frame: bytes, method: str) -> None:
        """Queue a notification frame made by :meth:`encode_notification` (of this codec)."""
        self._raise_if_closed(method)
        if len(frame) > self._frame_limit:
            raise self._too_large(len(frame), method)
        self._outbox.append(frame)

    @property
    def codec(self) -> Codec:
        return self._codec

    def deadline_of(self, request_id: RequestId) -> float | None:
        call = self._calls.get(request_id)
        return None if call is None else call.deadline

    # -- answering the peer ---------------------------------------------------------------

    def send_response(self, request_id: RequestId, result: Any) -> bool:
        """Answer a request; False (and nothing sent) if it was cancelled or answered."""
        method = self._incoming.pop(request_id, None)
        if method is None or self.closed:
            return False
        message = Response(
            id=request_id, timestamp=now_ms(), payload=ResponsePayload(success=True, result=result)
        )
        try:
            frame = self._encode_checked(message, method)
        except MessageTooLarge as exc:
            self._queue_error(request_id, ErrorCode.TOO_LARGE, exc.message)
        except (TypeError, ValueError) as exc:
            # A handler returned something JSON cannot carry: the caller still gets an answer.
            self._queue_error(request_id, ErrorCode.INTERNAL_ERROR, f"result not encodable: {exc}")
        else:
            self._outbox.append(frame)
        return True

    def send_error(self, request_id: RequestId, code: int, message: str, data: Any = None) -> bool:
        if self._incoming.pop(request_id, None) is None or self.closed:
            return False
        self._queue_error(request_id, code, message, data)
        return True

    def report_progress(
        self,
        request_id: RequestId,
        progress: float,
        total: float | None = None,
        message: str | None = None,
        *,
        artifact: Mapping[str, Any] | None = None,
    ) -> None:
        """Tell the caller a request is still alive (this also extends its deadline);
        ``artifact`` is a piece of an artifact the request is writing, passed on whole."""
        if request_id not in self._incoming or self.closed:
            return
        params: dict[str, Any] = {"id": request_id, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        if artifact is not None:
            params["artifact"] = dict(artifact)
        self._notify(PROGRESS, params)

    # -- input ------------------------------------------------------------------------------

    def receive_frame(self, frame: bytes, now: float) -> list[Event]:
        """Process one incoming frame; returns what happened."""
        self._last_received = now
        wire = _WIRE
        wire[0] += 1
        wire[1] += len(frame)
        if len(frame) > self._frame_limit:
            return self.receive_oversized(len(frame), frame[:512], now, frame[-512:])
        try:
            message = self._codec.decode(frame)
        except DecodeFailure as failure:
            return self._handle_invalid(failure, now)
        except Exception as exc:  # a codec bug must cost one frame, never the connection
            self._complain("mesh.codec_failed", now, exc_info=True)
            request_id, kind = salvage_id(frame[:512])
            broken = DecodeFailure(
                ErrorCode.INVALID_REQUEST,
                f"invalid message: {type(exc).__name__}",
                request_id=request_id,
                kind=kind,
            )
            return self._handle_invalid(broken, now)
        if isinstance(message, Response):
            return self._handle_response(message, now)
        if isinstance(message, Request):
            return self._handle_request(message)
        if isinstance(message, Notification):
            return self._handle_notification(message, now)
        self._stats.heartbeats_received += 1
        if message.payload.reply:
            beat = Heartbeat(id=new_request_id(), timestamp=now_ms())
            self._outbox.append(self._codec.encode(beat))
            self._stats.heartbeats_sent += 1
        return []

    def receive_oversized(
        self, size: int, head: bytes, now: float, tail: bytes = b""
    ) -> list[Event]:
        """A frame of ``size`` bytes was over the limit and discarded (``head`` and
        ``tail`` are its first and last bytes, where the codec looks for its id)."""
        self._last_received = now
        self._stats.oversized_frames += 1
        request_id, kind = self._codec.salvage(head, tail)
        reason = f"message of {size} bytes exceeds the {self._frame_limit}-byte limit"
        if kind == "response":
            # Never answered (an answer to an answer helps nobody): its call fails now.
            call = None if request_id is None else self._calls.finish(RequestId(request_id))
            if call is None:
                self._complain(
                    "mesh.oversized_answer_dropped", now, size=size, request_id=request_id
                )
                return []
            self._stats.calls_failed += 1
            error = self._error(MessageTooLarge, self._answer_too_large(size), call)
            return [CallDone(call.key, error=error)]
        self._complain(
            "mesh.frame_too_large", now, size=size, limit=self._frame_limit, request_id=request_id
        )
        self._queue_error(request_id, ErrorCode.TOO_LARGE, reason)
        return []

    def outbound_rejected(self, head: bytes, error: MeshError) -> list[Event]:
        """The transport refused a frame we sent (``head`` is its start): fail its call."""
        request_id, kind = salvage_id(head)
        call = (
            self._calls.finish(RequestId(request_id)) if request_id and kind == "request" else None
        )
        if call is None:
            log.warning("mesh.frame_rejected", kind=kind, reason=error.message)
            return []
        self._stats.calls_failed += 1
        error.with_context(
            agent=self._label.agent, method=call.info.what, transport=self._label.transport
        )
        return [CallDone(call.key, error=error)]

    def tick(self, now: float) -> list[Event]:
        """Fire whatever is due at ``now``: call deadlines, heartbeats, liveness."""
        if self.closed:
            return []
        events: list[Event] = []
        for call in self._calls.expired(now):
            self._stats.calls_timed_out += 1
            self._stats.calls_failed += 1
            error = self._error(CallTimeout, no_response_within(call.timeout), call)
            events.append(CallDone(call.key, error=error))
            self._notify(CANCELLED, {"id": call.key, "reason": "timeout"})
        ttl = self.config.heartbeat_ttl
        if ttl is not None and now >= self._last_received + ttl:
            silent = now - self._last_received
            events.extend(
                self.connection_lost(
                    ConnectionLost(
                        f"peer sent nothing for {silent:.1f} s (heartbeat TTL {ttl:g} s)",
                        agent=self._label.agent,
                        transport=self._label.transport,
                    )
                )
            )
            return events
        if self._next_heartbeat is not None and now >= self._next_heartbeat:
            interval = self.config.heartbeat_interval or 0.0
            # Heard nothing for a whole interval: ask the peer to answer, so our TTL
            # does not depend on how often it beats on its own.
            quiet = now - self._last_received >= interval
            payload = ASK_HEARTBEAT if quiet else HeartbeatPayload()
            beat = Heartbeat(id=new_request_id(), timestamp=now_ms(), payload=payload)
            self._outbox.append(self._codec.encode(beat))
            self._stats.heartbeats_sent += 1
            self._next_heartbeat = max(self._next_heartbeat + interval, now)
        return events

    def next_deadline(self) -> float | None:
        """When :meth:`tick` next has something to do, on the caller's clock."""
        if self.closed:
            return None
        first = self._calls.next_deadline()
        candidates = [] if first is None else [first]
        if self._next_heartbeat is not None:
            candidates.append(self._next_heartbeat)
        ttl = self.config.heartbeat_ttl
        if ttl is not None:
            candidates.append(self._last_received + ttl)
        return min(candidates) if candidates else None

    def connection_lost(self, error: ConnectionLost) -> list[Event]:
        """The link is gone: every pending call fails at once with ``error``'s reason."""
        if self._close_error is not None:
            return []
        error.with_context(agent=self._label.agent, transport=self._label.transport)
        self._close_error = error
        events: list[Event] = [
            CallDone(call.key, error=self._lost(call.info.what)) for call in self._calls.lose()
        ]
        self._stats.calls_failed += len(events)
        self._complaints.close(agent=self._label.agent, transport=self._label.transport)
        self._incoming.clear()
        self._outbox.clear()
        return events

    # -- internals --------------------------------------------------------------------------

    def _handle_response(self, message: Response, now: float) -> list[Event]:
        rid = RequestId(message.id) if message.id is not None else None
        call = self._calls.finish(rid) if rid is not None else None
        if call is None:
            self._stats.late_responses += 1
            payload = message.payload
            if rid is None and payload.error is not None:
                self._complain(
                    "mesh.peer_error", now, code=payload.error.code, message=payload.error.message
                )
            else:
                log.debug("mesh.late_response_dropped", request_id=message.id)
            return []
        assert rid is not None
        payload = message.payload
        if payload.success:
            self._stats.calls_succeeded += 1
            return [CallDone(rid, result=payload.result)]
        self._stats.calls_failed += 1
        info = payload.error
        assert info is not None  # the codec guarantees it
        error = error_from_code(
            info.code,
            info.message,
            agent=self._label.agent,
            method=call.info.what,
            transport=self._label.transport,
            data=info.data,
            relayed=call.info.method == ROUTE_METHOD,
        )
        return [CallDone(rid, error=error)]

    def _handle_request(self, message: Request) -> list[Event]:
        rid = RequestId(message.id)
        self._stats.requests_received += 1
        if rid in self._incoming:
            self._queue_error(rid, ErrorCode.INVALID_REQUEST, f"duplicate request id {rid!r}")
            return []
        method = message.payload.method
        limit = self.config.max_requests_in_progress
        if len(self._incoming) >= limit:
            self._queue_error(
                rid,
                ErrorCode.UNAVAILABLE,
                f"{limit} requests are in progress on this link (max_requests_in_progress): "
                "wait for an answer, then send again",
                {"limit": "max_requests_in_progress"},
            )
            return []
        self._incoming[rid] = method
        if message.traceparent is None:
            return [IncomingRequest(rid, method, message.payload.params)]
        trace = (message.traceparent, message.tracestate)
        return [IncomingRequest(rid, method, message.payload.params, trace)]

    def _handle_notification(self, message: Notification, now: float) -> list[Event]:
        self._stats.notifications_received += 1
        method = message.payload.method
        params = message.payload.params
        if method == CANCELLED:
            return self._peer_cancelled(params)
        if method == PROGRESS:
            return self._progress(params, now)
        return [IncomingNotification(method, params)]

    def _peer_cancelled(self, params: Any) -> list[Event]:
        rid = params.get("id") if isinstance(params, dict) else None
        if not isinstance(rid, str):
            return []
        # Reported even for an id this session does not hold: over HTTP the
        # request runs in another exchange, whose owner may still stop it.
        self._incoming.pop(RequestId(rid), None)
        reason = params.get("reason")
        return [CancelRequested(RequestId(rid), reason if isinstance(reason, str) else "cancelled")]

    def _progress(self, params: Any, now: float) -> list[Event]:
        rid = params.get("id") if isinstance(params, dict) else None
        call = self._calls.progressed(RequestId(rid), now) if isinstance(rid, str) else None
        if call is None:
            return []
        return [ProgressReported(call.key, params)]

    def _handle_invalid(self, failure: DecodeFailure, now: float) -> list[Event]:
        self._stats.invalid_frames += 1
        if failure.kind == "response":
            # Never answer a response (two peers could trade errors forever);
            # if it was meant for a call of ours, that call fails with the reason.
            rid = failure.request_id
            call = self._calls.finish(RequestId(rid)) if rid is not None else None
            if call is None:
                self._complain("mesh.invalid_response", now, reason=failure.reason)
                return []
            self._stats.calls_failed += 1
            error = self._error(ProtocolError, "bad answer from the peer: " + failure.reason, call)
            return [CallDone(call.key, error=error)]
        self._complain(
            "mesh.invalid_frame", now, reason=failure.reason, request_id=failure.request_id
        )
        self._queue_error(failure.request_id, failure.code, failure.reason)
        return []

    def _complain(self, event: str, now: float, **fields: Any) -> None:
        label = self._label
        self._complaints.note(event, now, agent=label.agent, transport=label.transport, **fields)

    def _queue_error(
        self, request_id: str | None, code: int, message: str, data: Any = None
    ) -> None:
        response = Response(
            id=request_id,
            timestamp=now_ms(),
            payload=ResponsePayload(
                success=False, error=ErrorInfo(code=code, message=message, data=data)
            ),
        )
        try:
            frame = self._codec.encode(response)
        except (TypeError, ValueError):
            frame = self._codec.encode(
                Response(
                    id=request_id,
                    timestamp=now_ms(),
                    payload=ResponsePayload(
                        success=False, error=ErrorInfo(code=code, message=message)
                    ),
                )
            )
        self._outbox.append(frame)

    def _notify(self, method: str, params: Any, *, checked: bool = False) -> None:
        if checked:
            self._outbox.append(self.encode_notification(method, params))
            return
        message = Notification(
            id=new_request_id(),
            timestamp=now_ms(),
            payload=NotificationPayload(method=method, params=params),
        )
        self._outbox.append(self._codec.encode(message))

    def _encode_checked(self, message: Request | Response | Notification, what: str) -> bytes:
        frame = self._codec.encode(message)
        if len(frame) > self._frame_limit:
            raise self._too_large(len(frame), what)
        return frame

    def _answer_too_large(self, size: int) -> str:
        """Says whose limit it is and what raises it (a manifest's ``max_frame_size``)."""
        agent = self._label.agent
        whose = f" of agent {agent!r}" if agent is not None else ""
        limit = self._frame_limit
        return f"answer of {size} bytes exceeds the {limit}-byte limit{whose} (max_frame_size)"

    def _too_large(self, size: int, what: str) -> MessageTooLarge:
        return MessageTooLarge(
            f"message of {size} bytes exceeds the {self._frame_limit}-byte limit",
            agent=self._label.agent,
            method=what,
            transport=self._label.transport,
        )

    def _error(
        self, cls: type[MeshError], message: str, call: PendingCall[RequestId, _Call]
    ) -> MeshError:
        return cls(
            message, agent=self._label.agent, method=call.info.what, transport=self._label.transport
        )

    def _raise_if_closed(self, method: str) -> None:
        if self._close_error is not None:
            raise self._lost(method)

    def _lost(self, method: str) -> ConnectionLost:
        """A fresh ConnectionLost for one call, carrying the link's cause."""
        cause = self._close_error
        assert cause is not None
        return link_lost(
            cause.message,
            cause,
            agent=self._label.agent,
            method=method,
            transport=self._label.transport,
        )


class LinkEnding(Protocol):
    """How a link ended, as :class:`transports.TransportClosed` and ConnectionLost tell it."""

    @property
    def exit_code(self) -> int | None: ...
    @property
    def close_code(self) -> int | None: ...
    @property
    def stderr_tail(self) -> tuple[str, ...]: ...


def link_lost(
    message: str,
    ending: LinkEnding,
    *,
    agent: str | None = None,
    method: str | None = None,
    transport: str | None = None,
) -> ConnectionLost:
    """A ConnectionLost saying ``message`` that carries how the link ended (exit code,
    close code, last stderr lines), so every error a dead link causes names its cause."""
    error = ConnectionLost(message, agent=agent, method=method, transport=transport)
    error.exit_code = ending.exit_code
    error.close_code = ending.close_code
    error.stderr_tail = ending.stderr_tail
    return error


def no_response_within(timeout: float) -> str:
    """What a call that timed out on this side's clock says (a driver that waits past
    its peer's own deadline tells the two apart by it)."""
    return f"no response within {timeout:g} s"


def _describe(method: str, params: Any) -> str:
    if method == "tools/call" and isinstance(params, dict):
        name = params.get("name")
        if isinstance(name, str):
            return f"tools/call {name}"
    return method
