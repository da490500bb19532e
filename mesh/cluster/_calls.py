"""Calls to agents another daemon holds, over NATS: a ``mesh/call`` on the one ``Peer``.

**One link per daemon.** Between two daemons runs a :class:`~mesh.Peer` like any
other link's, over the NATS subject pair of :mod:`mesh.cluster._stream` (each
daemon's frames go to the other's call subject, signed). A call to a mirrored
agent is a ``mesh/call`` request on the holder's link; its deadline, ``progress``
(each passed to ``on_progress``, each pushing the wait out up to a hard maximum)
and cancel are the peer's own, as on a direct link, and room control is methods
on the same link (:meth:`RemoteCalls.ask`). The holder applies the deadline
itself; we wait a little longer so its verdict, which names the agent, arrives
first. A holder that is gone ends the link at once: NATS says nobody listens there.

**Serving.** This daemon reads its own call subject and hands each frame to the
link of the daemon that signed it; a frame nobody we know signed is dropped and
logged (``cluster.forged``), so a daemon can call, answer or cancel in its own
name only. It serves ``mesh/call`` for the agents it holds, and calls only local
agents (never a hop further), so two daemons that briefly disagree on who holds
an agent cannot bounce a call between them. Each call carries who it is made for
(a :class:`~mesh._orchestrator.access.Principal`), as far as the daemon that
signed it may vouch (:func:`vouched`), and is made on their behalf here too:
this daemon's door checks it against its own agents' access sections.

**NATS away.** A call made while NATS is unreachable fails at once with a
message that says so; calls waiting for answers when the connection drops fail
at once too (they may or may not have run, and the message says that).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Final, Protocol, Unpack

import anyio
import anyio.abc
import msgspec

from mesh._errors import (
    AgentUnavailable,
    CallTimeout,
    Forbidden,
    InvalidParams,
    MeshError,
    MethodNotFound,
)
from mesh._logging import get_logger
from mesh._orchestrator.access import NOBODY, Principal
from mesh._rpc.asks import AskHandlers, forward_to
from mesh._rpc.caller import CallMethods, CallOptions, ProgressCallback
from mesh._rpc.peer import Peer, RequestContext, open_peer
from mesh._rpc.pending import DEFAULT_CALL_TIMEOUT, MAX_CALL_DURATION
from mesh._rpc.session import (
    ROUTE_METHOD,
    SessionConfig,
    SessionStatistics,
    no_response_within,
)
from mesh._telemetry.metrics import METRICS, served, timed
from mesh._telemetry.tracing import outgoing, serving, tool_of, trace_from
from mesh.cluster._keydir import KeyDirectory
from mesh.cluster._keys import DAEMON_HEADER, forged
from mesh.cluster._link import NatsLink, NatsMessage, Watch
from mesh.cluster._registry import HOLDER, RegistrySync
from mesh.cluster._settings import Names
from mesh.cluster._stream import DaemonStream, frame_limit
from mesh.cluster._wire import AgentEntry, CallRequest
from mesh.manifests._types import DEFAULT_ACCESS, AccessSection
from registry import AgentId, AgentStatus, ChangeKind, Registry, StatusChange

__all__ = ["ROOM_CONTROL_METHOD", "LocalCalls", "RemoteCaller", "RemoteCalls"]

log = get_logger("mesh.cluster")

#: We wait this much beyond the holder's deadline for its verdict (as ``mesh/call`` does).
ROUTE_MARGIN: Final = 1.0
#: A call made for an agent its origin holds waits this long for our mirror to say so
#: (the entry of an agent that has just joined crosses NATS in milliseconds).
HOLDER_WAIT: Final = 5.0
#: At a graceful stop, calls we are serving get this long to finish.
SERVE_DRAIN: Final = 5.0
#: How many remote agents' access sections are kept validated before starting afresh.
_ACCESS_KEPT: Final = 100_000
#: What an agent whose published access section does not validate admits: nobody.
NO_ACCESS: Final = AccessSection(callers=(), calls=())
#: What a daemon asks of a room another daemon holds (pause, a person's words, ...).
ROOM_CONTROL_METHOD: Final = "mesh/room-control"
#: A daemon link's session: NATS watches the connection (no heartbeats); a call may
#: run as long as on a direct link, plus the margin we wait for the holder's verdict.
_LINK_CONFIG: Final = SessionConfig(
    heartbeat_interval=None, max_call_duration=MAX_CALL_DURATION + ROUTE_MARGIN
)


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


class RoomControlAnswer(Protocol):
    """Answers what daemon ``signer`` asks of a room we hold (the rooms' replication)."""

    def __call__(self, params: Any, signer: str) -> Awaitable[Any]: ...


class _DaemonLink:
    """The link to one other daemon: the stream of the subject pair, the peer over it."""

    __slots__ = ("opened", "peer", "stream")

    def __init__(self, stream: DaemonStream) -> None:
        self.stream = stream
        self.peer: Peer | None = None
        self.opened = anyio.Event()


class _Served:
    """What a daemon link serves to the daemon at its other end (see :meth:`RemoteCalls.take`)."""

    __slots__ = ("_calls", "_origin")

    def __init__(self, calls: RemoteCalls, origin: str) -> None:
        self._calls = calls
        self._origin = origin

    def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Awaitable[Any]:
        return self._calls.take(ctx, self._origin, method, params)

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        log.debug("cluster.notification_ignored", origin=self._origin, method=method)


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
        #: What answers another daemon's room control; None: no rooms here.
        self.room_control: RoomControlAnswer | None = None
        self._names = names
        self._sync = sync
        self._registry = registry
        self._local = local
        self._authorize = authorize
        self._inbox = ""
        self._inbox_watch: Watch | None = None
        #: The link to each daemon we call or that calls us, made on the first frame.
        self._links: dict[str, _DaemonLink] = {}
        self._access = AccessSections()
        self._serving = 0  # requests of other daemons being served
        self._idle = anyio.Event()
        self._refusing = False  # draining: new calls are answered "shutting down"
        self._tasks: anyio.abc.TaskGroup | None = None
        self._subscription: Watch | None = None
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
        **asks: Unpack[AskHandlers],
    ) -> Any:
        """Call ``method`` on ``agent``, held by daemon ``holder``; see the module docstring.

        The agent's logs and asks come back over the link to the daemon, to ``asks``."""
        if not self._link.connected or not self._inbox:
            raise self._unreachable(holder, agent, method)
        trace = outgoing()  # the caller's span, for the holder's own
        request = CallRequest(
            agent=agent,
            method=method,
            params=params,
            timeout=timeout,
            origin=self._names.daemon,
            caller=outgoing_caller(caller, self._names.daemon),
            traceparent=None if trace is None else trace[0],
            tracestate=None if trace is None else trace[1],
        )
        with timed(METRICS.remote_calls, (), None):
            peer = await self._peer(holder, agent, method)
            self.calls_sent += 1
            try:
                return await peer.call(
                    ROUTE_METHOD,
                    request,
                    timeout=timeout + ROUTE_MARGIN,
                    on_progress=on_progress,
                    **asks,
                )
            except MeshError as exc:
                raise _from_holder(exc, holder, request) from None

    async def ask(self, holder: str, method: str, params: Any, *, timeout: float) -> Any:
        """Ask daemon ``holder`` ``method`` on its link (room control) and return its answer.
        Fails as a call does (:class:`~mesh.CallTimeout`, ``AgentUnavailable``,
        ``ConnectionLost``)."""
        if not self._link.connected or not self._inbox:
            raise AgentUnavailable(
                f"daemon {holder!r} cannot be asked {method!r}: {self._link.describe()}"
            )
        peer = await self._peer(holder, None, method)
        return await peer.call(method, params, timeout=timeout)

    async def _peer(self, daemon: str, agent: str | None, method: str) -> Peer:
        """The live peer of ``daemon``'s link, made if there is none. Its key first: its
        answers are taken only with its signature."""
        if daemon not in self._keys.keys.ring and not await self._keys.ensure(daemon):
            raise AgentUnavailable(
                f"daemon {daemon!r} has no key in mesh {self._names.cluster!r}, so its "
                "answers could not be told from forgeries",
                agent=agent,
                method=method,
            )
        link = self._link_to(daemon)
        if link is None:
            raise AgentUnavailable(
                f"daemon {self._names.daemon!r} is not serving the cluster (stopped)",
                agent=agent,
                method=method,
            )
        if link.peer is None:
            await link.opened.wait()
        if link.peer is None:
            raise AgentUnavailable(
                f"the link to daemon {daemon!r} ended as it opened: {link.stream.info.peer}",
                agent=agent,
                method=method,
            )
        return link.peer

    def _link_to(self, daemon: str) -> _DaemonLink | None:
        """``daemon``'s link, opened in our task group if there is none live (None: we
        are not serving)."""
        link = self._links.get(daemon)
        if link is not None and not link.stream.closed:
            return link
        if self._tasks is None:
            return None
        stream = DaemonStream(
            self._link,
            self._keys.keys,
            daemon,
            subject=self._names.calls(daemon),
            reply=f"{self._inbox}.{daemon}",
            limit=frame_limit(self._link.max_payload),
        )
        link = self._links[daemon] = _DaemonLink(stream)
        self._tasks.start_soon(self._run_link, daemon, link, name=f"cluster.link.{daemon}")
        return link

    async def _run_link(self, daemon: str, link: _DaemonLink) -> None:
        config = dataclasses.replace(_LINK_CONFIG, max_frame_size=link.stream.max_frame_size)
        try:
            served_here = _Served(self, daemon)
            async with open_peer(
                link.stream, handler=served_here, config=config, spans=False
            ) as peer:
                link.peer = peer
                link.opened.set()
                await peer.wait_closed()
        finally:
            link.stream.end("the cluster's calls stopped")
            link.opened.set()
            if self._links.get(daemon) is link:
                del self._links[daemon]

    def fail_pending(self, agent: str, reason: str) -> int:
        """Fail every call in flight to ``agent`` now with ``AgentUnavailable`` ``reason``."""
        to_agent = _to_agent(agent)
        return sum(
            link.peer.fail_pending(reason, to_agent)
            for link in list(self._links.values())
            if link.peer is not None
        )

    def _on_registry_change(self, change: StatusChange) -> None:
        # A mirrored agent went offline or left: the calls waiting on it end now, as
        # local ones do (its holder may be dead and never answer).
        if change.kind not in _GONE or not self._links:
            return
        holder = change.record.metadata.get(HOLDER)
        if holder is None:
            return
        agent = change.agent_id
        reason = f"agent {agent!r} (held by daemon {holder!r}) went {change.new}"
        for link in list(self._links.values()):
            # After the frames that came first: an answer sent before the agent left wins.
            link.stream.after_read(partial(self._fail_on, link, agent, reason))

    def _fail_on(self, link: _DaemonLink, agent: str, reason: str) -> None:
        failed = 0 if link.peer is None else link.peer.fail_pending(reason, _to_agent(agent))
        if failed:
            log.warning("cluster.calls_failed_offline", agent=agent, calls=failed)

    def _on_connection(self, connected: bool) -> None:
        if connected:
            return
        for daemon, link in list(self._links.items()):
            link.stream.end(
                f"the NATS connection dropped while daemon {daemon!r} was answering "
                "(the call may or may not have run)"
            )

    def _on_no_responders(self, message: NatsMessage) -> None:
        """NATS's word that nobody reads a daemon's call subject: its link ends now."""
        if not message.no_responders:
            return
        daemon = message.subject.rpartition(".")[2]
        link = self._links.get(daemon)
        if link is not None:
            link.stream.end(f"daemon {daemon!r} does not answer on NATS")

    async def open_inbox(self) -> None:
        """(Re)subscribe to this daemon's inbox, where NATS says a daemon is not listening."""
        if self._inbox_watch is not None:
            await self._inbox_watch.stop()
        inbox = self._link.new_inbox()
        self._inbox_watch = await self._link.subscribe(f"{inbox}.*", self._on_no_responders)
        self._inbox = inbox

    # -- serving ----------------------------------------------------------------------------

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the links to other daemons until cancelled (frames come by :meth:`listen`)."""
        try:
            async with anyio.create_task_group() as tg:
                self._tasks = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._tasks = None
            for link in list(self._links.values()):
                link.stream.end("the cluster's calls stopped")

    async def listen(self) -> None:
        """Subscribe to our call subject (nats-py keeps it over reconnects)."""
        if self._subscription is None:
            self._subscription = await self._link.subscribe(self._names.calls(), self._on_frame)

    async def stop_listening(self) -> None:
        """Take no new calls; let those being served finish (bounded); stop reading."""
        self._refusing = True
        with anyio.move_on_after(SERVE_DRAIN):
            await self._wait_served()
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            await subscription.stop()

    async def drain(self) -> None:
        """A graceful stop: refuse new calls (UNAVAILABLE, "shutting down"), and return
        once the calls being served are answered. The caller bounds the wait; until it
        ends, our agents stay listed, so the callers of those calls keep waiting for
        their answers instead of failing them as gone."""
        self._refusing = True
        await self._wait_served()

    async def _wait_served(self) -> None:
        """Until the requests being served are answered, the answers handed to NATS."""
        if self._serving:
            self._idle = anyio.Event()
            await self._idle.wait()
        for link in list(self._links.values()):
            await link.stream.wait_sent()

    def _on_frame(self, message: NatsMessage) -> None:
        """A frame on our call subject, for the link of the daemon that signed it."""
        keys = self._keys.keys
        signer = keys.signer(message.headers, message.subject, message.reply, message.data)
        if signer is None:
            claimed = message.headers.get(DAEMON_HEADER, "")
            if claimed and claimed not in keys.ring and self._tasks is not None:
                # A daemon that joined a moment ago, whose key the watch has not brought yet.
                self._tasks.start_soon(self._verify_later, message, claimed)
            else:
                forged(claimed, message.subject, "daemon link frame")
            return
        if signer == self._names.daemon:
            return  # a daemon never calls itself
        link = self._link_to(signer)
        if link is not None:
            link.stream.deliver(message.data)

    async def _verify_later(self, message: NatsMessage, claimed: str) -> None:
        if await self._keys.ensure(claimed):
            self._on_frame(message)
        else:
            forged(claimed, message.subject, "daemon link frame from a daemon with no key")

    def take(self, ctx: RequestContext, origin: str, method: str, params: Any) -> Awaitable[Any]:
        """Serve a request daemon ``origin`` (which signed it) made on its link."""
        if self._refusing:
            raise AgentUnavailable(
                f"daemon {self._names.daemon!r} is shutting down; it takes no new calls"
            )
        work: Awaitable[Any]
        if method == ROUTE_METHOD:
            work = self._serve_call(ctx, origin, params)
        elif method == ROOM_CONTROL_METHOD and self.room_control is not None:
            work = self.room_control(params, origin)
        else:
            raise MethodNotFound(
                f"daemon {self._names.daemon!r} serves other daemons {ROUTE_METHOD!r}"
                f"{' and ' + repr(ROOM_CONTROL_METHOD) if self.room_control else ''} "
                f"only, not {method!r}"
            )
        self._serving += 1
        return self._counted(work)

    async def _counted(self, work: Awaitable[Any]) -> Any:
        try:
            return await work
        finally:
            self._serving -= 1
            if not self._serving:
                self._idle.set()

    async def _serve_call(self, ctx: RequestContext, origin: str, params: Any) -> Any:
        try:
            request = msgspec.convert(params, CallRequest)
        except msgspec.ValidationError as exc:
            raise InvalidParams(f"invalid {ROUTE_METHOD} from daemon {origin!r}: {exc}") from None
        self.calls_served += 1

        def progress(params: Mapping[str, Any]) -> None:
            chunk = params.get("artifact")
            if isinstance(chunk, Mapping) and isinstance(chunk.get("name"), str):
                # a piece of an artifact stays one, so a caller through another daemon
                # streams it as the holder's own callers do
                piece = chunk["text"] if "text" in chunk else chunk.get("data")
                ctx.report_artifact(chunk["name"], piece, last=chunk.get("last") is True)
            else:
                ctx.report_progress(*_progress_of(params))

        trace = trace_from(
            {"traceparent": request.traceparent or "", "tracestate": request.tracestate or ""}
        )
        tool = tool_of(request.method, request.params)
        with (
            served("cluster", request.method),
            serving(request.method, trace, agent=request.agent, tool=tool),
        ):
            try:
                caller = await self._check(request, origin)
                return await self._local.call(
                    request.agent,
                    request.method,
                    request.params,
                    timeout=request.timeout,
                    on_progress=progress,
                    on_behalf_of=caller,
                    **forward_to(ctx),  # back over the link, to the calling daemon's caller
                )
            except MeshError as exc:
                raise exc.with_context(agent=request.agent, method=request.method) from None

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


def _to_agent(agent: str) -> Callable[[Any], bool]:
    """Picks the calls in flight (by their params) that go to ``agent``."""

    def to_agent(params: Any) -> bool:
        return isinstance(params, CallRequest) and params.agent == agent

    return to_agent


def _progress_of(params: Mapping[str, Any]) -> tuple[float, float | None, str | None]:
    """A local agent's ``progress`` params, as the link to the caller reports them."""
    progress, total, message = params.get("progress"), params.get("total"), params.get("message")
    return (
        float(progress) if isinstance(progress, int | float) else 0.0,
        float(total) if isinstance(total, int | float) else None,
        message if isinstance(message, str) else None,
    )


def _from_holder(error: MeshError, holder: str, request: CallRequest) -> MeshError:
    """``error`` as the caller of ``request`` should read it: our own clock's timeout
    (the holder never gave its verdict) says so; anything else names the agent, the
    method, and the holder it came through."""
    timeout = request.timeout or 0.0
    if isinstance(error, CallTimeout) and error.message == no_response_within(
        timeout + ROUTE_MARGIN
    ):
        return CallTimeout(
            f"no answer from daemon {holder!r} within {timeout:g} s",
            agent=request.agent,
            method=request.method,
            transport="nats",
        )
    error.agent, error.method = request.agent, request.method
    error.transport = f"nats via daemon {holder!r}"
    return error


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
            on_log=options.get("on_log"),
            on_elicit=options.get("on_elicit"),
            on_sample=options.get("on_sample"),
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
