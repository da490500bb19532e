"""A raw streamable-HTTP front for a stdio MCP server, so that the conformance suite
(which speaks only HTTP) can measure ``mesh mcp``.

Each ``initialize`` POSTed without ``Mcp-Session-Id`` spawns one child (the command
given: ``mesh mcp --agent conf ...``) and names a session for it; every later message
of that session goes to that child's stdin as it came, and every line the child
writes goes back as it came, in an SSE event:

- a POSTed request is written to the child and answered with an SSE stream of what
  the child sends until that request's response (its logs, progress and requests
  such as ``elicitation/create``), which ends the stream. While several requests
  wait, what the child sends that is not a response goes to the oldest one's stream;
- a POSTed notification, or a response (the client's answer to the child's request),
  is written to the child and answered ``202``;
- ``GET`` holds a stream for what the child sends while no request waits (held back,
  up to :data:`BACKLOG` lines, until one is open); ``DELETE`` ends the session and
  its child. The suite's client never sends ``DELETE``, so at most
  :data:`MAX_SESSIONS` children live at once: a new session ends the least
  recently used one.

The bridge answers nothing the child should: it parses a message only far enough to
route it (its ``id``, whether it has a ``method``). What it does answer is HTTP's own:
a missing or unknown session (``400``/``404``), a body that is not one JSON-RPC
message (``400``: stdio carries one object a line), a method other than
POST/GET/DELETE (``405``). So a scenario that tests those measures the bridge, not the
child: ``dns-rebinding-protection`` (the ``Origin`` rule is HTTP's; the bridge has
none) and ``server-sse-multiple-streams`` (how concurrent POST and GET streams are
kept apart is this routing), which the stdio runs leave out.
"""

from __future__ import annotations

import math
import secrets
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from transports import (
    BodyWriter,
    HttpRequest,
    HttpResponse,
    HttpServer,
    StdioProcessStream,
    TransportClosed,
    open_http_server,
    open_stdio_process,
)

__all__ = ["BACKLOG", "MAX_SESSIONS", "open_stdio_bridge"]

#: Lines the child sends while neither a request nor a GET stream waits, held for the
#: next GET stream (the oldest dropped past it): a few notifications at most.
BACKLOG: Final = 256
#: Children alive at once (the suite runs its scenarios one after another).
MAX_SESSIONS: Final = 4
#: What one line from the child may be: its answers are bounded by the daemon.
FROM_CHILD_LIMIT: Final = 64 << 20
_SESSION: Final = "mcp-session-id"


class _Peek(msgspec.Struct):
    """Just enough of a JSON-RPC message to route it."""

    id: Any = None
    method: Any = None


_peek = msgspec.json.Decoder(_Peek).decode
_Sink = MemoryObjectSendStream[bytes]


@dataclass(eq=False)
class _Child:
    """One session: its child and where each of its lines goes."""

    stream: StdioProcessStream
    #: The streams of requests waiting for their response, by id, oldest first.
    waiting: dict[Any, _Sink] = field(default_factory=dict)
    listener: _Sink | None = None
    backlog: deque[bytes] = field(default_factory=lambda: deque(maxlen=BACKLOG))
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def route(self, line: bytes) -> None:
        """A line from the child: to the request it answers, else to the oldest
        request still waiting, else to the GET stream (else held for it)."""
        try:
            peek = _peek(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            peek = _Peek()
        key = _key(peek.id) if peek.method is None and _is_key(peek.id) else None
        if key in self.waiting:
            sink = self.waiting.pop(key)
            _give(sink, line)
            sink.close()
            return
        for sink in self.waiting.values():
            if _give(sink, line):
                return
        if self.listener is not None and _give(self.listener, line):
            return
        self.backlog.append(line)


def _is_key(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _key(value: Any) -> Any:
    """Ids keyed with their type: ``1`` and ``"1"`` are two requests."""
    return (type(value), value)


def _give(sink: _Sink, line: bytes) -> bool:
    try:
        sink.send_nowait(line)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return False  # that client left
    return True


def _events(lines: MemoryObjectReceiveStream[bytes], first: Sequence[bytes] = ()) -> Any:
    async def produce(write: BodyWriter) -> None:
        with lines:
            for line in first:
                await write(b"event: message\ndata: " + line + b"\n\n")
            async for line in lines:
                await write(b"event: message\ndata: " + line + b"\n\n")

    return produce


def _refusal(status: int, message: str) -> HttpResponse:
    return HttpResponse.error(status, f"stdio bridge: {message}")


class _Bridge:
    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        command: Sequence[str],
        env: Mapping[str, str],
        later_env: Mapping[str, str],
    ) -> None:
        self._tg = tg
        self._command = command
        self._env = env
        self._later_env = later_env
        self._started = 0
        self.children: dict[str, _Child] = {}

    async def handle(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST":
            return await self._post(request)
        if request.method in ("GET", "DELETE"):
            child = self.children.get(request.header(_SESSION) or "")
            if child is None:
                return _refusal(404, "no such session")
            if request.method == "DELETE":
                child.scope.cancel()
                return HttpResponse(204)
            return self._listen(child)
        return _refusal(405, f"{request.method} is not one of POST, GET, DELETE")

    async def _post(self, request: HttpRequest) -> HttpResponse:
        body = request.body.strip()
        try:
            peek = _peek(body)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return _refusal(400, "the body is not one JSON-RPC message")
        if b"\n" in body:  # stdio carries one message a line: the same message, compact
            body = msgspec.json.encode(msgspec.json.decode(body))
        headers: list[tuple[str, str]] = []
        session = request.header(_SESSION)
        if session is None:
            if peek.method != "initialize":
                return _refusal(400, "no Mcp-Session-Id: initialize first")
            session = await self._open()
            headers.append((_SESSION, session))
        child = self.children.pop(session, None)
        if child is None:
            return _refusal(404, "no such session")
        self.children[session] = child  # now the most recently used
        if peek.method is None or not _is_key(peek.id):
            await child.stream.send(body)  # a notification, or an answer to the child
            return HttpResponse(202, headers=headers)
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)
        child.waiting[_key(peek.id)] = send
        await child.stream.send(body)
        return HttpResponse(
            200, content_type="text/event-stream", headers=headers, stream=_events(receive)
        )

    async def _open(self) -> str:
        """A new session and its child; past :data:`MAX_SESSIONS`, the oldest ends."""
        if len(self.children) >= MAX_SESSIONS:
            oldest = next(iter(self.children))
            self.children.pop(oldest).scope.cancel()
        session = secrets.token_urlsafe(16)
        self.children[session] = await self._tg.start(self._run_child, session)
        return session

    def _listen(self, child: _Child) -> HttpResponse:
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)
        if child.listener is not None:
            child.listener.close()
        child.listener = send
        held = list(child.backlog)
        child.backlog.clear()
        return HttpResponse(200, content_type="text/event-stream", stream=_events(receive, held))

    async def _run_child(self, session: str, *, task_status: anyio.abc.TaskStatus[_Child]) -> None:
        """The session's child, and its lines routed, until it exits or the session ends."""
        command, *args = self._command
        env = self._env if self._started == 0 else self._later_env
        self._started += 1
        async with open_stdio_process(
            command, args, env=env, inherit_env=True, max_frame_size=FROM_CHILD_LIMIT
        ) as stream:
            child = _Child(stream)
            task_status.started(child)
            try:
                with child.scope, suppress(TransportClosed):
                    while True:
                        child.route(await stream.receive())
            finally:
                self.children.pop(session, None)
                for sink in [*child.waiting.values(), child.listener]:
                    if sink is not None:
                        sink.close()


@asynccontextmanager
async def open_stdio_bridge(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    later_env: Mapping[str, str] | None = None,
) -> AsyncIterator[HttpServer]:
    """Serve ``command`` (a stdio MCP server) as streamable HTTP on a loopback port, one
    child per session, until the block ends (which ends every child).

    The first session's child runs with ``env``, every later one's with ``later_env``
    (default: ``env`` too), so that what is the same in every child, such as coverage's
    measurement of code that runs alike in each, can be paid for once.
    """
    async with anyio.create_task_group() as tg:
        first = env or {}
        bridge = _Bridge(tg, command, first, first if later_env is None else later_env)
        async with open_http_server(bridge.handle) as server:
            yield server
        tg.cancel_scope.cancel()
