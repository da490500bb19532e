"""Calls to agents another daemon holds, over NATS, with the deadline, cancel and progress.

**Calling.** A call to a mirrored agent is a :class:`CallRequest` published to
the holding daemon's call subject, with a reply subject under this daemon's
one inbox (one subscription for every call). Answers come back on it: any
number of ``progress`` (each passed to ``on_progress``, and each pushing the
wait out, up to a hard maximum, as on a direct link), then one ``result`` or
``error``. The holder applies the deadline itself; we wait a little longer so
its verdict, which names the agent, arrives first. Giving up (a timeout, or the
caller cancelled) tells the holder, which cancels the agent's call. A holder
that is gone answers at once: NATS says nobody listens there. A caller parks on
the loop's own one-shot wake-up, and one clock serves every call's deadline (a
``call_at`` timer on asyncio, a task on trio): no cancel scope or task per call.

**Serving.** This daemon takes calls for the agents it holds on its own call
subject, each in a task (on asyncio the loop's own, cancelled directly; on trio
the group's, in a cancel scope), and calls only local agents
(never a hop further), so two daemons that briefly disagree on who holds an
agent cannot bounce a call between them. Each call carries who it is made for
(a :class:`~mesh._orchestrator.access.Principal`), and is made on their behalf
here too: this daemon's door checks it against its own agents' access sections.

**NATS away.** A call made while NATS is unreachable fails at once with a
message that says so; calls waiting for answers when the connection drops fail
at once too (they may or may not have run, and the message says that).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, Unpack

import anyio
import anyio.abc
import msgspec

from mesh._errors import (
    AgentUnavailable,
    CallTimeout,
    ConnectionLost,
    ErrorCode,
    Forbidden,
    MeshError,
    error_from_code,
)
from mesh._logging import get_logger
from mesh._orchestrator.access import NOBODY, Principal
from mesh._rpc.asks import refusing
from mesh._rpc.caller import CallMethods, CallOptions, ProgressCallback
from mesh._rpc.pending import DEFAULT_CALL_TIMEOUT, MAX_CALL_DURATION, PendingCalls
from mesh._rpc.session import SessionStatistics
from mesh._telemetry.metrics import METRICS, served, timed
from mesh._telemetry.tracing import headers_for, outgoing, serving, tool_of, trace_from
from mesh.cluster._errors import ClusterError
from mesh.cluster._keydir import KeyDirectory
from mesh.cluster._keys import DAEMON_HEADER, forged
from mesh.cluster._link import NatsLink, NatsMessage, Watch
from mesh.cluster._registry import HOLDER, RegistrySync
from mesh.cluster._settings import Names
from mesh.cluster._wire import (
    CALL_REPLY,
    CALL_REQUEST,
    CANCEL_CALL,
    ENCODER,
    AgentEntry,
    CallFailed,
    CallProgress,
    CallReply,
    CallRequest,
    CallResult,
    CancelCall,
)
from mesh.manifests._types import DEFAULT_ACCESS, AccessSection
from registry import AgentId, AgentStatus, ChangeKind, Registry, StatusChange
from transports._loop import Cancellable, Clock, Spawner, Tasks, Wakeup, current_loop

__all__ = ["LocalCalls", "RemoteCaller", "RemoteCalls"]

log = get_logger("mesh.cluster")
#: An agent's asks (elicitation, sampling) during a call from another daemon: refused
#: at once, since they do not travel over NATS yet.
_NO_ASKS: Final = refusing(
    "the caller of this call is on another daemon: asks (elicitation, sampling) are not"
    " carried between daemons yet"
)

#: We wait this much beyond the holder's deadline for its verdict (as ``mesh/call`` does).
ROUTE_MARGIN: Final = 1.0
#: Telling the holder we gave up is best effort, and bounded.
CANCEL_TIMEOUT: Final = 1.0
#: A call made for an agent its origin holds waits this long for our mirror to say so
#: (the entry of an agent that has just joined crosses NATS in milliseconds).
HOLDER_WAIT: Final = 5.0
#: At a graceful stop, calls we are serving get this long to finish.
SERVE_DRAIN: Final = 5.0
#: Changes of a mirrored agent that end the calls waiting on it.
#: How many remote agents' access sections are kept validated before starting afresh.
_ACCESS_KEPT: Final = 100_000
#: What an agent whose published access section does not validate admits: nobody.
NO_ACCESS: Final = AccessSection(callers=(), calls=())


class AccessSections:
    """Remote agents' access sections, each validated once per entry its holder writes.

    Every call to a remote agent checks its section; converting the entry's JSON for
    each call was CPU on every remote call. An entry is replaced, never changed, when
    its holder writes it again, so the entry it came from says whether it is current.
    """

    def __init__(self, kept: int = _ACCESS_KEPT) -> None:
        self._known: dict[str, tuple[AgentEntry, AccessSection]] = {}
        self._kept = kept

    def of(self, agent_id: str, entry: AgentEntry | None) -> AccessSection | None:
        """``entry``'s section (None: no other daemon holds it; one that does not
        validate admits nobody: a refusal is safer than a guess)."""
        if entry is None:
            self._known.pop(agent_id, None)
            return None
        if entry.access is None:
            return DEFAULT_ACCESS
        known = self._known.get(agent_id)
        if known is not None and known[0] is entry:
            return known[1]
        try:
            access = msgspec.convert(entry.access, AccessSection)
        except (msgspec.ValidationError, ValueError, TypeError):
            log.warning("cluster.bad_access_section", agent=agent_id, holder=entry.daemon)
            access = NO_ACCESS
        if len(self._known) >= self._kept:
            self._known.clear()  # agents come and go: start again rather than grow
        self._known[agent_id] = (entry, access)
        return access

    def __len__(self) -> int:
        return len(self._known)


_GONE: Final = frozenset({ChangeKind.OFFLINE, ChangeKind.REMOVED, ChangeKind.DEREGISTERED})


class LocalCalls(Protocol):
    """What serves a call that reached this daemon: the orchestrator (for its own agents)."""

    async def call(
        self,
        agent: str,
        method: str,
        params: Any = None,
        *,
        on_behalf_of: Principal = ...,
        **options: Unpack[CallOptions],
    ) -> Any: ...


class _Waiter:
    """A call in flight, as the task that made it waits for it (the pending table's info).

    The caller parks on the loop's own one-shot wake-up (no cancel scope, no task):
    the answer, a lost link or the clock's deadline finishes it. A request that is no
    call (``body``: room control) takes the holder's signed answer as it is."""

    __slots__ = (
        "agent",
        "body",
        "done",
        "error",
        "expired",
        "holder",
        "method",
        "on_progress",
        "result",
    )

    def __init__(
        self,
        holder: str,
        agent: str | None,
        method: str,
        on_progress: ProgressCallback | None,
        done: Wakeup,
        *,
        body: bool = False,
    ) -> None:
        self.holder = holder
        self.agent = agent
        self.method = method
        self.on_progress = on_progress
        self.done = done
        self.body = body
        self.expired = False
        self.result: Any = None
        self.error: MeshError | None = None

    def finish(self, result: Any = None, error: MeshError | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


class RemoteCalls:
    """Both sides of calls between daemons; see the module docstring."""

    def __init__(
        self,
        link: NatsLink,
        names: Names,
        sync: RegistrySync,
        registry: Registry,
        local: LocalCalls,
        keys: KeyDirectory,
        *,
        authorize: Callable[[CallRequest], None] | None = None,
    ) -> None:
        self._link = link
        self._keys = keys
        #: Which daemon holds a room's lease (the rooms' lease view); None: no rooms here.
        self.room_holder: Callable[[str], Awaitable[str | None]] | None = None
        self._names = names
        self._sync = sync
        self._registry = registry
        self._local = local
        self._authorize = authorize
        self._inbox = ""
        self._inbox_watch: Watch | None = None
        self._numbers = itertools.count(1)
        #: Our calls in flight, by reply subject. The holder applies the deadline itself;
        #: we wait ROUTE_MARGIN longer, so its verdict, which names the agent, comes first.
        self._calls: PendingCalls[str, _Waiter] = PendingCalls(
            max_duration=MAX_CALL_DURATION + ROUTE_MARGIN
        )
        #: What stops each call we serve, by its reply subject.
        self._serving: dict[str, Cancellable] = {}
        self._access = AccessSections()
        loop = current_loop()
        self._now, self._wakeup = loop.now, loop.wakeup
        self._task_group = loop.task_group
        #: Every call's deadline, as a link's: the pending table says when it is next due.
        self._clock = Clock(loop, self._tick)
        #: Served calls run as tasks (the loop's own on asyncio), each cancelled alone.
        self._spawner = Spawner(loop)
        self._idle = anyio.Event()
        self._refusing = False  # draining: new calls are answered "shutting down"
        self._tasks: Tasks | None = None
        self._subscriptions: list[Watch] = []
        self.calls_sent = 0
        self.calls_served = 0
        link.add_listener(self._on_connection)
        registry.add_listener(self._on_registry_change)

    # -- the orchestrator's hook ------------------------------------------------------------

    def caller(
        self, agent_id: str, method: str, *, on_behalf_of: Principal = NOBODY
    ) -> RemoteCaller | None:
        """A Caller for an agent another daemon holds; None if no other daemon holds it.

        Its calls carry ``on_behalf_of`` to the holder, which checks it again."""
        entry = self._sync.entry(agent_id)
        if entry is None:
            return None
        if not self._link.connected:
            raise self._unreachable(entry.daemon, agent_id, method)
        record = self._registry.get(AgentId(agent_id))
        if record is not None and record.status is AgentStatus.OFFLINE:
            raise AgentUnavailable(
                f"agent {agent_id!r} (held by daemon {entry.daemon!r}) is offline",
                agent=agent_id,
                method=method,
            )
        return RemoteCaller(self, agent_id, entry.daemon, entry.call_timeout, on_behalf_of)

    def _unreachable(self, holder: str, agent: str, method: str) -> AgentUnavailable:
        return AgentUnavailable(
            f"agent {agent!r} is held by daemon {holder!r}, and {self._link.describe()}; "
            "only this daemon's own agents answer until NATS is back",
            agent=agent,
            method=method,
        )

    def access_of(self, agent_id: str) -> AccessSection | None:
        """The access section an agent's holder published (None if no other daemon holds it).

        One that does not validate admits nobody: a refusal is safer than a guess.
        """
        return self._access.of(agent_id, self._sync.entry(agent_id))

    # -- calling ----------------------------------------------------------------------------

    async def call(
        self,
        holder: str,
        agent: str,
        method: str,
        params: Any = None,
        *,
        timeout: float,
        on_progress: ProgressCallback | None = None,
        caller: Principal = NOBODY,
    ) -> Any:
        """Call ``method`` on ``agent``, held by daemon ``holder``; see the module docstring."""
        if not self._link.connected or not self._inbox:
            raise self._unreachable(holder, agent, method)
        if holder not in self._keys.keys.ring and not await self._keys.ensure(holder):
            raise AgentUnavailable(
                f"daemon {holder!r} has no key in mesh {self._names.cluster!r}, so its "
                "answers could not be told from forgeries",
                agent=agent,
                method=method,
            )
        reply = f"{self._inbox}.{next(self._numbers)}"
        waiter = _Waiter(holder, agent, method, on_progress, self._wakeup())
        call = self._calls.start(reply, waiter, now=self._now(), timeout=timeout + ROUTE_MARGIN)
        self._clock.arm(call.deadline)
        request = CallRequest(
            agent=agent,
            method=method,
            params=params,
            timeout=timeout,
            origin=self._names.daemon,
            caller=outgoing_caller(caller, self._names.daemon),
        )
        subject, data = self._names.calls(holder), ENCODER.encode(request)
        # Signed over where it goes and where answers go, so it cannot be replayed elsewhere;
        # the caller's span rides along, if traced.
        headers = {**headers_for(outgoing()), **self._keys.keys.headers(subject, reply, data)}

        def not_sent(error: ClusterError) -> None:
            self._finish(reply, error)

        with timed(METRICS.remote_calls, (), None):
            try:
                # Sent without waiting for the NATS loop (under trio, a crossing fewer);
                # a failure to send ends the call through not_sent.
                await self._link.send(subject, data, not_sent, reply=reply, headers=headers)
                self.calls_sent += 1
                await waiter.done.wait()
            except BaseException:
                if self._calls.abandon(reply) is not None:
                    await self._cancel(holder, reply)
                raise
            if waiter.expired:
                await self._cancel(holder, reply)
            if waiter.error is not None:
                raise waiter.error
            return waiter.result

    async def ask(self, holder: str, subject: str, data: bytes, *, timeout: float) -> bytes:
        """Send ``data`` to daemon ``holder`` on ``subject`` and wait for the answer it signs:
        its body. Room control asks a room's holder so: on the calls' own inbox, pending
        table and clock, signed over the subject, the reply subject and the body. Fails as a
        call does (:class:`~mesh.CallTimeout`, ``AgentUnavailable``, ``ConnectionLost``)."""
        if not self._link.connected or not self._inbox:
            raise AgentUnavailable(
                f"daemon {holder!r} cannot be asked on {subject}: {self._link.describe()}"
            )
        reply = f"{self._inbox}.{next(self._numbers)}"
        waiter = _Waiter(holder, None, subject, None, self._wakeup(), body=True)
        call = self._calls.start(reply, waiter, now=self._now(), timeout=timeout)
        self._clock.arm(call.deadline)
        headers = self._keys.keys.headers(subject, reply, data)

        def not_sent(error: ClusterError) -> None:
            self._finish(reply, error)

        try:
            await self._link.send(subject, data, not_sent, reply=reply, headers=headers)
            await waiter.done.wait()
        except BaseException:
            self._calls.abandon(reply)
            raise
        if waiter.error is not None:
            raise waiter.error
        answer: bytes = waiter.result
        return answer

    def fail_pending(self, agent: str, reason: str) -> int:
        """Fail every call in flight to ``agent`` now with ``AgentUnavailable`` ``reason``."""
        lost = self._calls.lose(lambda call: call.info.agent == agent)
        for call in lost:
            call.info.finish(error=AgentUnavailable(reason, agent=agent))
        return len(lost)

    def _on_registry_change(self, change: StatusChange) -> None:
        # A mirrored agent went offline or left: the calls waiting on it end now, as
        # local ones do (its holder may be dead and never answer).
        if change.kind not in _GONE or not self._calls:
            return
        holder = change.record.metadata.get(HOLDER)
        if holder is None:
            return
        failed = self.fail_pending(
            change.agent_id,
            f"agent {change.agent_id!r} (held by daemon {holder!r}) went {change.new}",
        )
        if failed:
            log.warning("cluster.calls_failed_offline", agent=change.agent_id, calls=failed)

    # -- the clock: one for every call in flight --------------------------------------------

    def _tick(self) -> float | None:
        """The clock's: fail the calls past their deadline; the next deadline."""
        self._expire(self._now())
        return self._calls.next_deadline()

    def _expire(self, now: float) -> None:
        for call in self._calls.expired(now):
            waiter = call.info
            waiter.expired = True
            margin = 0.0 if waiter.body else ROUTE_MARGIN
            waiter.finish(
                error=CallTimeout(
                    f"no answer from daemon {waiter.holder!r} within {call.timeout - margin:g} s",
                    agent=waiter.agent,
                    method=waiter.method,
                    transport="nats",
                )
            )

    async def _cancel(self, holder: str, reply: str) -> None:
        note = ENCODER.encode(CancelCall(reply=reply))
        subject = self._names.cancels(holder)
        headers = self._keys.keys.headers(subject, note)

        def not_sent(error: ClusterError) -> None:
            log.debug("cluster.cancel_not_sent", holder=holder, error=str(error))

        with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT):
            try:
                await self._link.send(subject, note, not_sent, headers=headers)
            except ClusterError as exc:
                not_sent(exc)

    def _on_reply(self, message: NatsMessage) -> None:
        call = self._calls.get(message.subject)
        if call is None:
            return  # an answer to a call we gave up on
        holder = call.info.holder
        if message.no_responders:
            self._finish(
                message.subject, AgentUnavailable(f"daemon {holder!r} does not answer on NATS")
            )
            return
        if self._keys.keys.signer(message.headers, message.subject, message.data) != holder:
            # Not the holder's answer: dropped, the call waits on for the real one.
            what = "room control answer" if call.info.body else "call answer"
            forged(message.headers.get(DAEMON_HEADER), message.subject, what)
            return
        if call.info.body:
            self._finish(message.subject, None, message.data)
            return
        try:
            reply: CallReply = CALL_REPLY.decode(message.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            error = ConnectionLost(f"daemon {holder!r} sent an answer that does not decode: {exc}")
            self._finish(message.subject, error)
            return
        if isinstance(reply, CallProgress):
            # Still at it: the deadline moves out (the clock, armed earlier, re-arms later).
            self._calls.progressed(message.subject, self._now())
            if call.info.on_progress is not None:
                call.info.on_progress(reply.params)
        elif isinstance(reply, CallResult):
            self._finish(message.subject, None, reply.result)
        else:
            self._finish(message.subject, _error(reply, holder))

    def _finish(self, reply: str, error: MeshError | None, result: Any = None) -> None:
        call = self._calls.finish(reply)
        if call is not None:
            call.info.finish(result, error)

    def _on_connection(self, connected: bool) -> None:
        if connected:
            return
        for call in self._calls.lose():
            call.info.finish(
                error=ConnectionLost(
                    f"the NATS connection dropped while daemon {call.info.holder!r} was "
                    "answering (the call may or may not have run)"
                )
            )

    async def open_inbox(self) -> None:
        """(Re)subscribe to this daemon's inbox: one subscription for every call's answers."""
        if self._inbox_watch is not None:
            await self._inbox_watch.stop()
        inbox = self._link.new_inbox()
        self._inbox_watch = await self._link.subscribe(f"{inbox}.*", self._on_reply)
        self._inbox = inbox

    # -- serving ----------------------------------------------------------------------------

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Take calls for our agents until cancelled (subscriptions are made by :meth:`listen`)."""
        try:
            async with self._task_group() as tg:
                self._tasks = tg
                self._clock.run_in(tg)
                task_status.started()
                await anyio.sleep_forever()
        finally:
            for serving in list(self._serving.values()):
                serving.cancel()  # asyncio's served calls are the loop's tasks, not the group's
            self._clock.stop()

    async def listen(self) -> None:
        """Subscribe to our call and cancel subjects (nats-py keeps them over reconnects)."""
        if self._subscriptions:
            return
        calls = await self._link.subscribe(self._names.calls(), self._on_request)
        cancels = await self._link.subscribe(self._names.cancels(), self._on_cancel)
        self._subscriptions = [calls, cancels]

    async def stop_listening(self) -> None:
        """Take no new calls; let those being served finish (bounded)."""
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            await subscription.stop()
        if self._serving:
            self._idle = anyio.Event()
            with anyio.move_on_after(SERVE_DRAIN):
                await self._idle.wait()

    async def drain(self) -> None:
        """A graceful stop: refuse new calls (UNAVAILABLE, "shutting down"), and return
        once the calls being served are answered. The caller bounds the wait; until it
        ends, our agents stay listed, so the callers of those calls keep waiting for
        their answers instead of failing them as gone."""
        self._refusing = True
        if self._serving:
            self._idle = anyio.Event()
            await self._idle.wait()

    def _on_request(self, message: NatsMessage) -> None:
        if self._tasks is None or not message.reply:
            return
        origin = self._origin(message)
        if origin is None:
            return
        if self._refusing:
            refused = CallFailed(
                code=ErrorCode.UNAVAILABLE,
                message=f"daemon {self._names.daemon!r} is shutting down; it takes no new calls",
            )
            self._tasks.start_soon(self._send, message.reply, refused)
            return
        self._serving[message.reply] = self._spawner.start(
            self._tasks, self._answer, message, origin, name="cluster.serve"
        )

    def _origin(self, message: NatsMessage) -> str | None:
        """The daemon that signed this request, its answers going to its own inbox; None
        (and the request dropped, unanswered) if none did. A daemon that joined a moment
        ago, whose key the watch has not brought yet, is checked again once it is read."""
        keys = self._keys.keys
        signer = keys.signer(message.headers, message.subject, message.reply, message.data)
        claimed = message.headers.get(DAEMON_HEADER, "")
        if signer is None and claimed and claimed not in keys.ring:
            if self._tasks is not None:
                self._tasks.start_soon(self._verify_later, message, claimed)
            return None
        if signer is None or not message.reply.startswith(self._names.inbox_of(signer) + "."):
            # Never answered: the reply subject may be another daemon's inbox, where an
            # answer signed by us would pass for ours.
            forged(claimed, message.subject, "call request")
            return None
        return signer

    async def _verify_later(self, message: NatsMessage, claimed: str) -> None:
        if await self._keys.ensure(claimed):
            self._on_request(message)
        else:
            forged(claimed, message.subject, "call request from a daemon with no key")

    def _on_cancel(self, message: NatsMessage) -> None:
        signer = self._keys.keys.signer(message.headers, message.subject, message.data)
        try:
            note = CANCEL_CALL.decode(message.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if signer is None or not note.reply.startswith(self._names.inbox_of(signer) + "."):
            forged(message.headers.get(DAEMON_HEADER), message.subject, "cancel")
            return  # only the daemon that made a call may cancel it
        serving = self._serving.get(note.reply)
        if serving is not None:
            serving.cancel()

    async def _answer(self, message: NatsMessage, origin: str) -> None:
        # Cancelling it (the caller gave up, or we stop) ends it here, unanswered.
        reply = message.reply
        try:
            answer = await self._run_request(message.data, origin, reply, message.headers)
            await self._send(reply, answer)
        finally:
            self._serving.pop(reply, None)
            if not self._serving:
                self._idle.set()

    async def _run_request(
        self, data: bytes, origin: str, reply: str, headers: dict[str, str]
    ) -> CallReply:
        try:
            request = CALL_REQUEST.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return CallFailed(code=ErrorCode.INVALID_REQUEST, message=f"invalid call: {exc}")
        self.calls_served += 1

        def progress(params: Mapping[str, Any]) -> None:
            if self._tasks is not None:
                self._tasks.start_soon(self._send, reply, CallProgress(params=dict(params)))

        try:
            trace = trace_from(headers)
            with (
                served("cluster", request.method),
                serving(
                    request.method,
                    trace,
                    agent=request.agent,
                    tool=tool_of(request.method, request.params),
                ),
            ):
                caller = await self._check(request, origin)
                result = await self._local.call(
                    request.agent,
                    request.method,
                    request.params,
                    timeout=request.timeout,
                    on_progress=progress,
                    on_behalf_of=caller,
                    **_NO_ASKS,
                )
        except MeshError as exc:
            exc.with_context(agent=request.agent, method=request.method)
            return CallFailed(
                code=exc.code,
                message=exc.message,
                data=_data(exc),
                agent=exc.agent,
                method=exc.method,
                transport=exc.transport,
            )
        except Exception as exc:  # a bug here must answer, not leave the caller waiting
            log.exception("cluster.serve_crashed", agent=request.agent, method=request.method)
            return CallFailed(code=ErrorCode.INTERNAL_ERROR, message=f"{type(exc).__name__}: {exc}")
        return CallResult(result=result)

    async def _check(self, request: CallRequest, origin: str) -> Principal:
        """Who the call is made for, as far as ``origin`` (the daemon that signed it) may
        vouch (the door checks them next); see :func:`vouched`."""
        if not self._sync.is_local(request.agent):
            raise AgentUnavailable(
                f"agent {request.agent!r} is not held by daemon {self._names.daemon!r}"
            )
        if self._authorize is not None:
            self._authorize(request)
        named = request.caller
        if named is not None and named.kind == "agent":
            await self._wait_holder(named.name, origin)
        caller = vouched(request, origin, self._sync.holder)
        if caller.room is not None:
            holder = None if self.room_holder is None else await self.room_holder(caller.room)
            if holder != origin:
                raise _refused(
                    request,
                    f"a call from daemon {origin!r} is made for room {caller.room!r}, whose "
                    f"lease daemon {origin!r} does not hold (a daemon speaks for the rooms it "
                    "runs only)",
                )
        return caller

    async def _wait_holder(self, agent_id: str, origin: str) -> None:
        """Until our mirror has ``origin`` holding ``agent_id``, bounded: an agent of a
        daemon that joined a moment ago may call before its entry has reached us."""
        if self._sync.holder(agent_id) == origin:
            return
        with anyio.move_on_after(HOLDER_WAIT):
            async with self._registry.subscribe() as changes:
                if self._sync.holder(agent_id) == origin:
                    return
                async for _ in changes:
                    if self._sync.holder(agent_id) == origin:
                        return

    async def _send(self, reply: str, answer: CallReply) -> None:
        try:
            data = ENCODER.encode(answer)
        except (TypeError, msgspec.EncodeError) as exc:
            data = ENCODER.encode(
                CallFailed(code=ErrorCode.INTERNAL_ERROR, message=f"answer not encodable: {exc}")
            )
        headers = self._keys.keys.headers(reply, data)

        def lost(error: ClusterError) -> None:
            log.info("cluster.answer_lost", reply=reply, error=str(error))

        try:
            await self._link.send(reply, data, lost, headers=headers)
        except ClusterError as exc:
            lost(exc)


#: The only kinds of caller a daemon vouches for to another: a token of its own, an agent
#: it holds (either of them perhaps through a room it runs).
#: Whom a daemon may vouch for to another: its client tokens, its agents, and its own
#: reads (which the holder's door lets read and nothing else).
_VOUCHABLE: Final = frozenset({"client", "agent", "daemon"})


def outgoing_caller(caller: Principal, daemon: str) -> Principal:
    """Who a call leaving ``daemon`` is made for, as the holder is told: the embedding
    program is trusted on its own daemon only, so elsewhere it is a client token
    ``embedder@<daemon>`` with no admin rights (its rooms stay its rooms)."""
    if caller.kind != "embedder":
        return caller
    return msgspec.structs.replace(caller, kind="client", name=f"embedder@{daemon}", admin=False)


def vouched(request: CallRequest, origin: str, holder_of: Callable[[str], str | None]) -> Principal:
    """The caller a call from ``origin`` may name: a client (never admin: tokens belong
    to their daemon), an agent ``origin`` holds, or its own reads (``tools/list``,
    ``agent/info``, ``ping``, as the door allows them). Anything else is refused
    (:class:`~mesh.Forbidden`), naming the rule."""
    caller = request.caller
    if request.origin != origin:
        raise _refused(
            request,
            f"a call signed by daemon {origin!r} says it comes from daemon {request.origin!r}; "
            "a daemon calls in its own name only",
        )
    if caller is None:
        raise _refused(
            request,
            f"a call from daemon {origin!r} says nobody it is made for; "
            "calls between daemons carry their caller",
        )
    if caller.kind not in _VOUCHABLE:
        raise _refused(
            request,
            f"a call from daemon {origin!r} is made for {caller.kind!r}; a daemon vouches to "
            "another for a client token, an agent of its own or its own reads only "
            "(calls between daemons)",
        )
    if caller.kind == "agent" and holder_of(caller.name) != origin:
        raise _refused(
            request,
            f"a call from daemon {origin!r} is made for agent {caller.name!r}, which daemon "
            f"{origin!r} does not hold (a daemon speaks for its own agents only)",
        )
    if caller.admin:
        # A token is valid on its own daemon only: an admin there is a client here.
        return msgspec.structs.replace(caller, admin=False)
    return caller


def _refused(request: CallRequest, message: str) -> Forbidden:
    return Forbidden(message, agent=request.agent, method=request.method)


def _data(exc: MeshError) -> Any:
    try:
        ENCODER.encode(exc.data)
    except (TypeError, msgspec.EncodeError):
        return repr(exc.data)
    return exc.data


def _error(failed: CallFailed, holder: str) -> MeshError:
    via = f"{failed.transport} via daemon {holder!r}" if failed.transport else f"daemon {holder!r}"
    return error_from_code(
        failed.code,
        failed.message,
        agent=failed.agent,
        method=failed.method,
        transport=via,
        data=failed.data,
        relayed=True,  # the holder's verdict on its link to the agent
    )


class RemoteCaller(CallMethods):
    """A :class:`~mesh.Caller` for one agent another daemon holds (the orchestrator's hook)."""

    __slots__ = ("_agent", "_calls", "_default_timeout", "_holder", "_on_behalf_of")

    def __init__(
        self,
        calls: RemoteCalls,
        agent: str,
        holder: str,
        default_timeout: float | None,
        on_behalf_of: Principal = NOBODY,
    ) -> None:
        self._on_behalf_of = on_behalf_of
        self._calls = calls
        self._agent = agent
        self._holder = holder
        self._default_timeout = default_timeout or DEFAULT_CALL_TIMEOUT

    @property
    def agent(self) -> str | None:
        return self._agent

    @property
    def holder(self) -> str:
        return self._holder

    @property
    def connected(self) -> bool:
        return self._calls._link.connected

    @property
    def closed(self) -> bool:
        return False

    def statistics(self) -> SessionStatistics:
        return SessionStatistics()

    async def call(self, method: str, params: Any = None, **options: Unpack[CallOptions]) -> Any:
        timeout = options.get("timeout")
        return await self._calls.call(
            self._holder,
            self._agent,
            method,
            params,
            timeout=self._default_timeout if timeout is None else timeout,
            on_progress=options.get("on_progress"),
            caller=self._on_behalf_of,
        )

    async def notify(self, method: str, params: Any = None) -> None:
        self.notify_nowait(method, params)

    def fail_pending(self, reason: str) -> int:
        return self._calls.fail_pending(self._agent, reason)

    def notify_nowait(self, method: str, params: Any = None) -> None:
        raise AgentUnavailable(
            f"notifications are not carried to agents on other daemons (daemon {self._holder!r})",
            agent=self._agent,
            method=method,
        )

    async def wait_closed(self) -> None:
        await anyio.sleep_forever()

    async def aclose(self) -> None:
        return None
