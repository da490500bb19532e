"""A connection that survives its transport: redial, re-handshake, re-register, with backoff.

:func:`open_reconnecting_peer` keeps a :class:`~mesh.Peer` alive over a
:data:`transports.Connector`. One task owns the connection: it dials, runs the
``agent/info`` handshake and the ``on_connect`` hook, hands the peer to callers,
waits for the link to die, and dials again after a full-jitter backoff
(:mod:`mesh._backoff`). A call made while disconnected waits for the next
connection within its own deadline, or fails at once if asked to. Calls in flight
when the link drops fail with the drop's reason and are never resent: they may
already have run. When the policy's attempts run out the peer gives up where
everyone can see it: an event, a warning in the log, and ``ConnectionLost`` to
every waiting and later call.

Not every failure is worth another attempt. As websockets' ``process_exception``
does, the policy classifies the error that ended an attempt
(:meth:`ReconnectPolicy.classify`): the network and the peer failing (a refused
dial, a dropped link, a handshake that timed out) are retried with backoff; a
refusal (``Unauthorized``, a close with a refusal code) and a bug (a ``TypeError``
in the ``on_connect`` hook, say) end it at once, and the one warning says which
error it was, unwrapped from any task group it came through.
"""

from __future__ import annotations

import dataclasses
import math
import random as _random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, Unpack

import anyio
import anyio.abc

from mesh._backoff import DEFAULT_BASE, DEFAULT_CAP, backoff
from mesh._errors import CallTimeout, ConnectionLost, Forbidden, MeshError, Unauthorized
from mesh._logging import get_logger
from mesh._rpc.boundary import map_transport_errors
from mesh._rpc.caller import CallOptions
from mesh._rpc.connect import DEFAULT_CONNECT_TIMEOUT, handshake
from mesh._rpc.peer import Peer, RequestHandler, open_peer
from mesh._rpc.session import SessionConfig, SessionStatistics
from transports import Connector, TransportError, unwrap_single_error

__all__ = [
    "ConnectionEvent",
    "ConnectionState",
    "EventKind",
    "ReconnectPolicy",
    "ReconnectingPeer",
    "open_reconnecting_peer",
]

log = get_logger("mesh.reconnect")

#: Backstop for :meth:`ReconnectingPeer.aclose`. The peer flushes for at most half a
#: second and a transport's ``aclose`` is bounded by its own contract; this only keeps
#: a misbehaving connector from holding ``aclose`` forever.
CLOSE_TIMEOUT: Final = 5.0


class ReconnectCallOptions(CallOptions, total=False):
    """:class:`~mesh.CallOptions`, and whether a call made while disconnected waits."""

    #: Wait for the connection (within ``timeout``) or fail at once; None: the policy's.
    wait_for_connection: bool | None


ConnectionState = Literal["connecting", "connected", "reconnecting", "gave_up", "closed"]
EventKind = Literal["connected", "disconnected", "reconnecting", "gave_up", "closed"]
OnConnect = Callable[[Peer], Awaitable[None]]
ProcessException = Callable[[Exception], Exception | None]

#: What the network and the peer raise when they fail: worth another attempt. The mesh's
#: own errors (``ConnectFailed``, ``ConnectionLost``, ``CallTimeout``, a peer's
#: ``RemoteError`` or ``ProtocolError``) are too, but for refusals.
_TRANSIENT: Final = (
    MeshError,
    TransportError,
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconnectPolicy:
    """When to redial, how long to wait between attempts, and what calls do meanwhile."""

    #: The first wait is uniform in [0, base); each later ceiling doubles (see backoff()).
    base: float = DEFAULT_BASE
    cap: float = DEFAULT_CAP
    #: Consecutive failed attempts before giving up; None retries for ever.
    max_attempts: int | None = None
    #: True: the first connection is retried like a reconnection, so an agent that
    #: is still starting is waited for. False: one attempt, and its error is raised.
    retry_initial_connect: bool = True
    #: What a call made while disconnected does unless it says otherwise: True waits
    #: for the connection (bounded by the call's own timeout), False fails at once.
    wait_for_connection: bool = True
    #: A link closed with one of these codes, or a dial answered ``Unauthorized``, is
    #: never redialled: the other side refused us (a wrong or revoked token, an id it
    #: will not accept) and asking again cannot change its mind. 4001 and 4003 are
    #: the mesh's "unauthorized" and "forbidden" close codes.
    refusal_close_codes: frozenset[int] = frozenset({4001, 4003})
    #: Decides whether the error that ended an attempt is worth another: return None to
    #: retry, or the exception to give up with (websockets' ``process_exception``). It
    #: is given the error unwrapped from single-error groups. None: :meth:`classify`'s
    #: default (the network retried; refusals and bugs final).
    process_exception: ProcessException | None = dataclasses.field(default=None, compare=False)
    #: Returns a float in [0, 1); replace it to make the schedule reproducible.
    random: Callable[[], float] = dataclasses.field(
        default=_random.random, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None, got {self.max_attempts}")
        backoff(base=self.base, cap=self.cap)  # raises on a negative base or cap

    def classify(self, error: Exception) -> Exception | None:
        """None if ``error`` is worth another attempt, else the error to give up with."""
        error = _unwrapped(error)
        if self.process_exception is not None:
            return self.process_exception(error)
        if isinstance(error, BaseExceptionGroup):  # several at once: final if any one is
            final = [self.classify(leaf) for leaf in _leaves(error)]
            return next((f for f in final if f is not None), None)
        if self.refused(error) or not isinstance(error, _TRANSIENT):
            return error
        if isinstance(error, MeshError) and error.final:
            return error  # the far end told us plainly that asking again cannot help
        return None

    def refused(self, error: BaseException | None) -> bool:
        """Did the other side refuse us (a refused token, a refusal close code)?"""
        close_code = getattr(error, "close_code", None)
        return isinstance(error, Unauthorized | Forbidden) or (
            close_code in self.refusal_close_codes
        )

    def delays(self) -> Iterator[float]:
        """The waits of one reconnection cycle, without end (the loop counts attempts)."""
        return backoff(base=self.base, cap=self.cap, random=self.random)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionEvent:
    """Something happened to the connection; handed to ``on_event`` and logged.

    - ``connected``: attempt ``attempt`` succeeded (handshake and hook done).
    - ``disconnected``: the link died; ``error`` is why.
    - ``reconnecting``: waiting ``delay`` seconds, then attempt ``attempt``;
      ``error`` is why the last connection or attempt ended. Also sent between the
      attempts of the first connection.
    - ``gave_up``: ``attempt`` attempts failed; ``error`` is what callers now get.
    - ``closed``: closed locally; the last event.
    """

    kind: EventKind
    agent: str
    attempt: int = 0
    delay: float | None = None
    error: BaseException | None = None


OnEvent = Callable[[ConnectionEvent], None]

_WARNINGS: Final = frozenset({"disconnected", "gave_up"})


class ReconnectingPeer:
    """A :class:`~mesh.Peer` that redials when its link dies.

    Made by :func:`open_reconnecting_peer`; a :class:`~mesh.Caller` whose calls go
    to the current connection (``call_tool``, ``list_tools`` and ``ping`` are that
    connection's own, once it is there).
    """

    def __init__(
        self,
        connector: Connector,
        *,
        agent: str,
        policy: ReconnectPolicy,
        config: SessionConfig | None,
        handler: RequestHandler | None,
        on_connect: OnConnect | None,
        on_event: OnEvent | None,
        connect_timeout: float,
        admission: anyio.CapacityLimiter | None = None,
    ) -> None:
        self._connector = connector
        self._admission = admission
        self._agent = agent
        self._policy = policy
        self._config = config
        self._handler = handler
        self._on_connect = on_connect
        self._on_event = on_event
        self._connect_timeout = connect_timeout
        self._call_timeout = (config or SessionConfig()).call_timeout
        self._state: ConnectionState = "connecting"
        self._peer: Peer | None = None
        self._attempt = 0
        self._last_error: Exception | None = None
        self._ended: ConnectionLost | None = None  # gave up or closed: calls fail with this
        self._changed = anyio.Event()
        self._scope = anyio.CancelScope()
        self._stopped = anyio.Event()
        self._loop_task: int | None = None
        self._ever_connected = False
        # Statistics: the sessions before the latest are summed; the latest is read live.
        self._earlier = SessionStatistics()
        self._latest: Peer | None = None

    # -- what callers see --------------------------------------------------------------------

    @property
    def agent(self) -> str:
        return self._agent

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def attempt(self) -> int:
        """Connection attempts made since the link was last up (0 while connected)."""
        return self._attempt

    @property
    def connected(self) -> bool:
        return self._live_peer() is not None

    @property
    def closed(self) -> bool:
        """True once it will never connect again: closed, or gave up."""
        return self._ended is not None

    def statistics(self) -> SessionStatistics:
        """Counts summed over every connection that came up (calls in flight: the current one)."""
        if self._latest is None:
            return dataclasses.replace(self._earlier)
        return _sum(self._earlier, self._latest.statistics())

    @property
    def close_error(self) -> ConnectionLost | None:
        """Why it will never connect again (gave up, or closed locally); None until then.

        When it gave up because the other side refused it, ``__cause__`` is the
        refusal (an :class:`~mesh.Unauthorized`, or the close that said so).
        """
        return self._ended

    @property
    def current(self) -> Peer | None:
        """The live connection underneath, if any (e.g. ``current.stream.pid`` over stdio)."""
        return self._live_peer()

    async def wait_connected(self) -> None:
        """Wait until connected; raises :class:`~mesh.ConnectionLost` once it gave up or closed."""
        await self._wait_peer(None)

    async def call(
        self,
        method: str,
        params: Any = None,
        **options: Unpack[ReconnectCallOptions],
    ) -> Any:
        """Call ``method`` over the current connection; see :meth:`mesh.Peer.call`.

        While disconnected, ``wait_for_connection`` (default: the policy's) chooses
        between waiting for the connection, within ``timeout`` (which then covers the
        wait and the call together; :class:`~mesh.CallTimeout` when it passes), and
        failing at once with :class:`~mesh.ConnectionLost`. A call in flight when the
        link drops fails with the drop's reason and is not resent.
        """
        peer = self._peer
        if peer is not None and not peer.closed:  # connected: no wait to work out
            return await peer.call(method, params, **_call_options(options, options.get("timeout")))
        wait = options.get("wait_for_connection")
        peer, remaining = await self._peer_for(method, options.get("timeout"), wait)
        return await peer.call(method, params, **_call_options(options, remaining))

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        **options: Unpack[ReconnectCallOptions],
    ) -> Any:
        """Call one of the agent's tools (``tools/call``); see :meth:`mesh.Peer.call_tool`."""
        wait = options.get("wait_for_connection")
        peer, remaining = await self._peer_for("tools/call", options.get("timeout"), wait)
        return await peer.call_tool(name, arguments, **_call_options(options, remaining))

    async def list_tools(
        self, *, timeout: float | None = None, wait_for_connection: bool | None = None
    ) -> list[dict[str, Any]]:
        """The agent's tools: name, description and JSON Schema of the arguments."""
        peer, remaining = await self._peer_for("tools/list", timeout, wait_for_connection)
        return await peer.list_tools(timeout=remaining)

    async def ping(
        self, *, timeout: float | None = None, wait_for_connection: bool | None = None
    ) -> float:
        """Round-trip a ``ping``; returns the seconds the round trip took (not the wait)."""
        peer, remaining = await self._peer_for("ping", timeout, wait_for_connection)
        return await peer.ping(timeout=remaining)

    async def notify(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        wait_for_connection: bool | None = None,
    ) -> None:
        """Send a notification; ``timeout`` bounds only the wait for a connection."""
        peer, _ = await self._peer_for(method, timeout, wait_for_connection)
        peer.notify_nowait(method, params)

    def notify_nowait(self, method: str, params: Any = None) -> None:
        """Send a notification now; :class:`~mesh.ConnectionLost` if not connected."""
        peer = self._live_peer()
        if peer is None:
            raise self._unavailable(method)
        peer.notify_nowait(method, params)

    def fail_pending(self, reason: str) -> int:
        """Fail the calls in flight on the current link (see :meth:`mesh.Peer.fail_pending`)."""
        peer = self._live_peer()
        return 0 if peer is None else peer.fail_pending(reason)

    async def wait_closed(self) -> None:
        """Wait until it will never connect again: closed, or gave up (see ``closed``)."""
        while self._ended is None:
            await self._changed.wait()

    async def aclose(self) -> None:
        """Stop reconnecting and close the connection; bounded, and safe to call twice."""
        if self._state != "closed":
            if self._ended is None:
                self._ended = ConnectionLost(f"connection to agent {self._agent!r} closed locally")
            self._state = "closed"
            self._scope.cancel()
            self._wake()
            self._emit("closed")
        if self._loop_task == anyio.get_current_task().id:
            return  # called from the hook: the loop ends when it unwinds to its cancelled scope
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
            await self._stopped.wait()

    # -- waiting for a connection -------------------------------------------------------------

    def _live_peer(self) -> Peer | None:
        peer = self._peer
        return peer if peer is not None and not peer.closed else None

    async def _peer_for(
        self, method: str, timeout: float | None, wait: bool | None
    ) -> tuple[Peer, float | None]:
        """The peer to send on, and the time left for the call after waiting for it."""
        peer = self._live_peer()
        if peer is not None:
            return peer, timeout
        if self._ended is None and not (self._policy.wait_for_connection if wait is None else wait):
            raise self._unavailable(method)
        budget = self._call_timeout if timeout is None else timeout
        started = anyio.current_time()
        with anyio.move_on_after(budget):
            return await self._wait_peer(method), max(
                0.0, budget - (anyio.current_time() - started)
            )
        raise CallTimeout(
            f"not connected within the call's {budget:g} s deadline "
            f"({self._state}, last error: {_describe(self._last_error)})",
            agent=self._agent,
            method=method,
        )

    async def _wait_peer(self, method: str | None) -> Peer:
        while True:
            if self._ended is not None:
                raise self._final_error(method)
            peer = self._live_peer()
            if peer is not None:
                return peer
            await self._changed.wait()

    def _unavailable(self, method: str) -> ConnectionLost:
        if self._ended is not None:
            return self._final_error(method)
        return ConnectionLost(
            f"not connected ({self._state}, attempt {self._attempt}; "
            f"last error: {_describe(self._last_error)}) and the call chose not to wait",
            agent=self._agent,
            method=method,
        )

    def _final_error(self, method: str | None) -> ConnectionLost:
        # A fresh exception per caller: raising one instance from many tasks tangles tracebacks.
        assert self._ended is not None
        error = ConnectionLost(self._ended.message, method=method)
        error.__cause__ = self._ended.__cause__
        return error

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    # -- the connection loop (one task owns it) -------------------------------------------------

    async def _run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Keep connected until closed or out of attempts; ``started`` once the first cycle ends."""
        self._loop_task = anyio.get_current_task().id
        try:
            with self._scope:
                await self._keep_connected(task_status)
        finally:
            self._stopped.set()

    async def _keep_connected(self, task_status: anyio.abc.TaskStatus[None]) -> None:
        policy = self._policy
        delays = policy.delays()
        limit = policy.max_attempts if policy.retry_initial_connect else 1
        started = False
        wait_first = False  # the very first attempt is made at once
        while True:
            if wait_first:
                delay = next(delays)
                self._emit("reconnecting", self._attempt + 1, delay, self._last_error)
                await anyio.sleep(delay)
            wait_first = True
            self._attempt += 1
            came_up = await self._connection(task_status if not started else None)
            # A link that came up has said started(); a refusal after that (a token
            # revoked, an id taken over) must not say it twice.
            started = started or came_up
            final = None if self._last_error is None else policy.classify(self._last_error)
            if final is not None:
                self._last_error = final
                self._give_up(final=True)
                if not started:
                    task_status.started()
                return
            if came_up:
                delays, limit = policy.delays(), policy.max_attempts
            elif limit is not None and self._attempt >= limit:
                self._give_up()
                if not started:
                    task_status.started()
                return

    async def _connection(self, task_status: anyio.abc.TaskStatus[None] | None) -> bool:
        """One attempt; if it comes up, serve until the link drops. True if it came up."""
        peer: Peer | None = None
        # Held from before the dial until the link is up (or the attempt failed): peers
        # sharing a limiter take turns, and the deadline below starts once admitted.
        admitted = self._admission
        if admitted is not None:
            await admitted.acquire()
        try:
            # One deadline bounds the dial, the handshake and the hook; lifted once up.
            # What escapes is translated into the mesh's tree. No agent or transport: the
            # messages built from it name the agent, and an opaque connector's own names where.
            with (
                anyio.CancelScope(deadline=anyio.current_time() + self._connect_timeout) as bound,
                map_transport_errors(agent=None),
            ):
                async with (
                    self._connector() as stream,
                    open_peer(
                        stream, handler=self._handler, config=self._config, agent=self._agent
                    ) as candidate,
                ):
                    await handshake(candidate, timeout=self._connect_timeout)
                    if self._on_connect is not None:
                        await self._on_connect(candidate)
                    bound.deadline = math.inf
                    if admitted is not None:
                        admitted.release()
                        admitted = None
                    peer = candidate
                    self._went_up(peer)
                    if task_status is not None:
                        task_status.started()
                    try:
                        await peer.wait_closed()
                    finally:
                        self._went_down(peer)
            if peer is None and bound.cancelled_caught:
                self._failed(self._too_slow())
        except Exception as exc:
            if peer is None:
                self._failed(exc)
            else:  # the link was up; closing what was left of it failed, which changes nothing
                log.debug("mesh.connection_close_failed", agent=self._agent, error=_describe(exc))
        finally:
            if admitted is not None:
                admitted.release()
        return peer is not None

    def _too_slow(self) -> CallTimeout:
        """An attempt that did not come up in time; one that never has says so."""
        within = f"within {self._connect_timeout:g} s"
        if self._ever_connected:
            return CallTimeout(f"not connected {within}")
        return CallTimeout(f"never came up: not connected {within} (start_timeout)")

    def _went_up(self, peer: Peer) -> None:
        if self._ended is not None:
            return  # closed from the hook: the cancelled scope unwinds us at the next await
        if self._latest is not None:
            self._earlier = _sum(self._earlier, self._latest.statistics())
        self._latest = peer
        self._peer = peer
        self._ever_connected = True
        self._state = "connected"
        self._last_error = None
        attempt, self._attempt = self._attempt, 0
        self._emit("connected", attempt)
        self._wake()

    def _went_down(self, peer: Peer) -> None:
        self._peer = None
        if self._ended is not None:
            return  # closing: aclose has said so
        self._state = "reconnecting"
        self._last_error = peer.close_error or ConnectionLost("the connection ended")
        self._emit("disconnected", error=self._last_error)
        self._wake()

    def _failed(self, error: Exception) -> None:
        # Not logged here: the "reconnecting" or "gave_up" line that follows names it.
        self._last_error = _unwrapped(error)

    def _give_up(self, *, final: bool = False) -> None:
        verb = "reconnecting" if self._ever_connected else "connecting"
        plural = "" if self._attempt == 1 else "s"
        why = f"after {self._attempt} attempt{plural}"
        if self._policy.refused(self._last_error):
            why += ", refused"
        elif final:
            why += ", not a network error"
        error = ConnectionLost(
            f"gave up {verb} to agent {self._agent!r} {why}: {_describe(self._last_error)}"
        )
        error.__cause__ = self._last_error
        self._ended = error
        self._state = "gave_up"
        self._emit("gave_up", self._attempt, error=error)
        self._wake()

    def _emit(
        self,
        kind: EventKind,
        attempt: int = 0,
        delay: float | None = None,
        error: BaseException | None = None,
    ) -> None:
        event = ConnectionEvent(
            kind=kind, agent=self._agent, attempt=attempt, delay=delay, error=error
        )
        fields: dict[str, Any] = {"agent": self._agent, "attempt": attempt}
        if delay is not None:
            fields["delay"] = round(delay, 3)
        if error is not None:
            fields["error"] = _describe(error)
        (log.warning if kind in _WARNINGS else log.info)(f"mesh.connection_{kind}", **fields)
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:  # an observer's bug must not take the connection down
                log.exception("mesh.connection_event_handler_crashed", kind=kind)


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "none"
    if isinstance(error, MeshError | TransportError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def _unwrapped(error: Exception) -> Exception:
    """The only error inside (nested) single-error groups; ``error`` itself otherwise."""
    while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _leaves(group: BaseExceptionGroup[Any]) -> Iterator[Exception]:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from _leaves(error)
        elif isinstance(error, Exception):
            yield error


def _sum(a: SessionStatistics, b: SessionStatistics) -> SessionStatistics:
    totals = {f.name: getattr(a, f.name) + getattr(b, f.name) for f in dataclasses.fields(a)}
    return SessionStatistics(**totals)


@asynccontextmanager
async def open_reconnecting_peer(
    connector: Connector,
    *,
    agent: str,
    policy: ReconnectPolicy = ReconnectPolicy(),
    config: SessionConfig | None = None,
    handler: RequestHandler | None = None,
    on_connect: OnConnect | None = None,
    on_event: OnEvent | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    admission: anyio.CapacityLimiter | None = None,
) -> AsyncIterator[ReconnectingPeer]:
    """Connect through ``connector`` and stay connected for the ``async with``.

    Each attempt opens a fresh stream (so the connector re-authenticates), runs
    ``open_peer`` and the ``agent/info`` handshake, then awaits ``on_connect(peer)``
    (re-register there, using the peer it is given); only then are calls routed to
    it. ``connect_timeout`` bounds one attempt: dial, handshake and hook together.
    ``admission``, shared by several peers, limits how many of their attempts run at
    once (each attempt's deadline starts when it is admitted): a hundred agent
    processes started together on two cores would each miss a deadline that any
    one of them meets, and be killed and started again, for ever.
    Entering returns once connected; if the first connection cannot be made
    (after the policy's attempts, see ``retry_initial_connect``) it raises
    :class:`~mesh.ConnectionLost`. Leaving closes the connection and stops the loop.
    """
    peer = ReconnectingPeer(
        connector,
        agent=agent,
        policy=policy,
        config=config,
        handler=handler,
        on_connect=on_connect,
        on_event=on_event,
        connect_timeout=connect_timeout,
        admission=admission,
    )
    with unwrap_single_error():
        async with anyio.create_task_group() as tg:
            await tg.start(peer._run)
            try:
                if peer._ended is not None:
                    raise peer._final_error(None)
                yield peer
            finally:
                await peer.aclose()


def _call_options(options: ReconnectCallOptions, timeout: float | None) -> CallOptions:
    """The options a connection's own call takes: the deadline (what is left of it after
    a wait for the connection), the progress callback and the ask handlers."""
    passed: CallOptions = {"timeout": timeout, "on_progress": options.get("on_progress")}
    if "on_log" in options:
        passed["on_log"] = options["on_log"]
    if "on_elicit" in options:
        passed["on_elicit"] = options["on_elicit"]
    if "on_sample" in options:
        passed["on_sample"] = options["on_sample"]
    return passed
