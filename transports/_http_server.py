"""One port for HTTP and WebSocket: llhttp (httptools) over an anyio listener.

llhttp parses HTTP/1.1 in C (:mod:`transports._http_wire`; we write no HTTP parsing);
a request that asks to upgrade to WebSocket is handed, parsed, with whatever bytes came
after its head, to websockets' sans-I/O server (:mod:`transports._websocket`), which
does not parse it again. Everything else goes
to an ``HttpHandler``: a plain ``async (HttpRequest) -> HttpResponse`` function.

Slow and half-open clients cannot pin the server: the head and body of a request
must arrive within ``request_timeout`` of its first byte, an idle keep-alive
connection is closed after ``keepalive_timeout``, and bodies over
``max_body_size`` are refused with 413 before they are read. A request head
(request line and headers) longer than ``max_header_size`` is refused with 431,
exactly: a head of that many bytes is read, one byte more is not. Past
``max_connections`` open connections a new one gets 503 and is closed, so a
flood of connections meets a refusal rather than the process's file limit. A
client that disconnects while its request is handled, or while a streamed answer
is still being produced, cancels the handler or the producer: its caller is gone,
so its work (a tool call of minutes, say) stops with it.

Given a ``vouch`` function, the server keeps connections that have shown no
credentials apart from those that have (:mod:`transports._admission`): a new
connection must send its first byte within ``first_byte_timeout`` and its head
within ``head_timeout``, and strangers cannot take the slots of known callers.
"""

from __future__ import annotations

import json
import math
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.abc
import anyio.lowlevel
from anyio.streams.tls import TLSListener

from transports._accept import serve_listener
from transports._admission import HOLDER_FULL, Admission, Slot, Standing, Vouch, current_slot
from transports._base import DEFAULT_MAX_FRAME_SIZE
from transports._groups import unwrap_single_error
from transports._http_messages import BodyWriter, HttpRequest, HttpResponse
from transports._http_wire import LAST_CHUNK, BadRequest, Head, RequestParser, chunk, response_head
from transports._logging import get_logger
from transports._loop import Scope, current_loop
from transports._sockets import SocketIO, offered_io, raw_socket, read_ahead_io, socket_io

__all__ = [
    "HttpServer",
    "HttpServerConfig",
    "UpgradeHandler",
    "open_http_server",
]

log = get_logger("transports.http")

#: What sending to a client that already left raises.
_GONE: Final = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


@dataclass(frozen=True, slots=True)
class HttpServerConfig:
    #: Largest request body accepted (the mesh's message limit, by default).
    max_body_size: int = DEFAULT_MAX_FRAME_SIZE
    #: Request line plus headers (through the blank line); longer is refused with 431.
    max_header_size: int = 64 * 1024
    #: Connections open at once (idle keep-alives and WebSockets count); more get 503.
    #: With a ``vouch`` function, the known callers' pool, shared fairly among holders
    #: (:mod:`transports._admission`).
    max_connections: int = 1000
    #: A request must be complete this long after its first byte (slow-loris guard).
    request_timeout: float = 30.0
    #: An idle keep-alive connection is closed after this long.
    keepalive_timeout: float = 60.0
    #: A new connection (or a stranger's idle one) must send a byte within this long.
    first_byte_timeout: float = 10.0
    #: A request head must be complete this long after its first byte.
    head_timeout: float = 10.0
    #: With a ``vouch`` function: connections not (yet) vouched for, at most; the
    #: oldest of them not being answered makes room for a new one. None: no pool of their own.
    max_unauthenticated_connections: int | None = None
    #: With a ``vouch`` function: slots beyond ``max_connections`` that only a
    #: privileged request may take.
    reserved_connections: int = 0
    #: With a ``vouch`` function that names holders (:class:`Vouched`): connections one
    #: known holder may have open (HTTP and WebSocket); past it the holder's oldest idle
    #: keep-alive makes room, or the request gets 429. None: not bounded.
    max_connections_per_identity: int | None = None


HttpHandler = Callable[[HttpRequest], Awaitable[HttpResponse]]
#: Takes over an upgraded connection: the raw stream, the request, and the bytes
#: that arrived after the request head.
UpgradeHandler = Callable[[anyio.abc.ByteStream, HttpRequest, bytes], Awaitable[None]]


#: Where a cycle is, for what its deadline passing means.
_IDLE: Final = "waiting for a request"
_HEAD: Final = "reading its head"
_BODY: Final = "reading its body"


class _Closed(Exception):
    """The client went away (or sent garbage); nothing more to say to it."""


class _HttpConnection:
    # Slots: an idle WebSocket link holds the connection that upgraded, a dict less each.
    __slots__ = (
        "_answering",
        "_buffer",
        "_by",
        "_client",
        "_config",
        "_due",
        "_io",
        "_keep_alive",
        "_loop",
        "_phase",
        "_served",
        "_server",
        "_slot",
        "_stream",
    )

    def __init__(
        self, stream: anyio.abc.ByteStream, server: HttpServer, client: str, slot: Slot
    ) -> None:
        self._stream = stream
        #: Reads without resuming and pausing the socket each time, writes without a wait
        #: when the socket has room (anyio's stream does both per call); released to the
        #: upgrade handler, which is given the stream.
        self._io = socket_io(stream)
        self._loop = current_loop()
        self._server = server
        self._slot = slot
        self._config = server.config
        self._client = client
        #: What was read and not yet parsed: the rest of a request, or the next ones.
        self._buffer = bytearray()
        self._served = 0
        #: This cycle's answer has begun: an error can no longer be said in HTTP.
        self._answering = False
        self._keep_alive = True
        self._phase = _IDLE
        #: The request's scope while it is read, and the deadline its phase has: set on
        #: the scope only before a wait (:meth:`_receive_in_time`), so a request whose
        #: bytes are all in moves no deadline (each move reschedules a timer).
        self._by: Scope | None = None
        self._due = math.inf

    async def run(self) -> None:
        try:
            upgrade = await self._serve()
            if upgrade is not None:  # a WebSocket upgrade: the connection is handed over
                await self._upgrade(upgrade)
        finally:
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()

    async def _serve(self) -> HttpRequest | None:
        """Requests one after another: the one that asks to upgrade, or None to close.

        On trio, once a first request is in that is not an upgrade, a task of the
        connection's reads its socket all along (:class:`ReadAheadIO`): one task per
        connection, not one per request, tells a handler that its client left. A link's
        upgrade, its first request, starts none; a later one stops it, and what it read
        goes to the upgrade's handler with the rest of the buffer.
        """
        try:
            request = await self._next_request()
        except _Closed:
            return None
        if request is None or self._slot.upgraded:
            return request
        ahead = read_ahead_io(self._io, self._loop.wakeup)
        if ahead is None:
            return await self._serve_from(request)
        self._io = ahead
        with unwrap_single_error():
            async with self._loop.task_group() as tasks:
                tasks.start_soon(ahead.read_all_along, name="http.read_ahead")
                try:
                    upgrade = await self._serve_from(request)
                finally:
                    tasks.cancel_scope.cancel()
                    self._io = ahead.inner
        # Only now: a read the task was woken for is done before the task ends.
        self._buffer += ahead.unread()
        return upgrade

    async def _serve_from(self, request: HttpRequest | None) -> HttpRequest | None:
        """Answer ``request`` and those after it; the one that asks to upgrade, or None."""
        try:
            while request is not None and not self._slot.upgraded:
                if not await self._answer(request):
                    return None
                request = await self._next_request()
        except _Closed:
            return None
        return request

    async def _next_request(self) -> HttpRequest | None:
        """The next request (:meth:`_read_request`), or None when the connection should
        close: a 408 said if it did not arrive in time."""
        self._answering = False
        self._phase = _IDLE
        # One cancel scope for the wait, the head and the body, its deadline moved on at
        # each: a scope per phase cost more than llhttp's whole parse (trio's scopes most).
        by = self._by = self._loop.cancel_scope()
        try:
            with by:
                request = await self._read_request(by)
        finally:
            self._by, self._due = None, math.inf  # an upgraded link keeps no float of its own
        if by.cancelled_caught:
            await self._timed_out()
            return None
        return request  # an upgrade's lives on without a deadline

    async def _read_request(self, by: Scope) -> HttpRequest | None:
        """The next request, body and all (an upgrade's: its head), or None to close. Its
        first byte within the idle wait, its head ``head_timeout`` after that byte, all of
        it within ``request_timeout``: ``by``'s deadline, moved on at each phase (set when
        a wait needs it)."""
        config = self._config
        if self._buffer:  # a pipelined request: let others run, as a wait for it would
            await anyio.lowlevel.checkpoint()
        else:
            by.deadline = self._loop.now() + self._idle_wait()
            data = await self._receive_chunk()
            if not data:
                return None  # close quietly
            self._buffer += data
        self._served += 1
        self._phase = _HEAD
        start = self._loop.now()
        self._due = start + min(config.head_timeout, config.request_timeout)
        parser = await self._read_head()
        self._phase = _BODY
        self._due = start + config.request_timeout
        head = parser.head
        self._keep_alive = head.keep_alive
        request = HttpRequest(
            head.method.decode(),
            head.target.decode("latin-1"),
            _headers(head),
            b"",
            self._client,
            head.version,
        )
        if not await self._admit(request):
            return None
        if self._is_websocket_upgrade(head):
            if head.length or head.chunked:
                await self._send_error(400, "an upgrade request must not carry a body")
                return None
            self._slot.upgraded = True
            return request
        body = await self._read_body(parser)
        return None if body is None else request.with_body(body)

    def _idle_wait(self) -> float:
        """How long the next request's first byte may take: ``keepalive_timeout``, or
        ``first_byte_timeout`` for a new connection and for a stranger's between requests."""
        config = self._config
        stranger = self._server.vouch is not None and self._slot.standing is Standing.STRANGER
        if self._served == 0 or stranger:
            return min(config.first_byte_timeout, config.keepalive_timeout)
        return config.keepalive_timeout

    async def _timed_out(self) -> None:
        """408 for a request that did not arrive in time; an idle connection closes quietly."""
        config = self._config
        if self._phase is _IDLE:
            return
        if self._phase is _HEAD and config.head_timeout <= config.request_timeout:
            await self._send_error(408, f"head not complete within {config.head_timeout:g} s")
        else:
            timeout = config.request_timeout
            await self._send_error(408, f"request not complete within {timeout:g} s")

    async def _answer(self, request: HttpRequest) -> bool:
        """Run the handler and write its answer; whether the connection serves on."""
        # A request is in progress until its answer is written: a drain that waits
        # for requests must not cut an answer that is on its way out.
        self._server._request_started()
        self._slot.evictable = False
        try:
            response = await self._respond_while_connected(request)
            if response is None:
                return False  # the client hung up: its work was cancelled, nobody to answer
            if response.stream is not None:
                await self._send_stream(response, response.stream, request.method == "HEAD")
                return self._keep_alive
            await self._send(response, head_only=request.method == "HEAD")
        finally:
            self._server._request_finished()
            self._slot.evictable = True
        return self._keep_alive

    async def _admit(self, request: HttpRequest) -> bool:
        """Vouch for the connection by this request's credentials; False (after a 503)
        if the pool they admit it to is full."""
        server = self._server
        if server.vouch is None:
            return True
        refused = server.admission.promote(self._slot, server.vouch(request))
        if refused is None:
            # A known caller's request is not cut to make room, body included.
            self._slot.evictable = self._slot.standing is Standing.STRANGER
            return True
        if refused == HOLDER_FULL:
            limit = server.config.max_connections_per_identity
            await self._send_error(
                429,
                f"too many connections: these credentials have {limit} open ({refused})",
                limit=refused,
            )
        else:
            limit = server.config.max_connections
            await self._send_error(
                503,
                f"too many connections: {limit} are open and no one holds more than your "
                f"share ({refused})",
                limit=refused,
            )
        return False

    async def _read_head(self) -> RequestParser:
        """The request's head, parsed; never reads more than ``max_header_size`` for it.

        The head is framed here (its blank line found in the buffer), so its limit is
        exact: a head of that many bytes is read, one byte more is not. llhttp sees each
        piece as it comes, so garbage is refused at once, not at the limit.
        """
        limit = self._config.max_header_size
        parser = RequestParser()
        buffer = self._buffer
        fed = 0
        while True:
            end = buffer.find(b"\r\n\r\n", max(0, fed - 3))
            size = end + 4 if end >= 0 else len(buffer)
            if size > limit:
                if end >= 0:
                    why = f"request head of {size} bytes exceeds the {limit}-byte limit"
                else:
                    why = f"request head exceeds the {limit}-byte limit"
                await self._send_error(431, why)
                raise _Closed
            try:
                parser.feed_head(memoryview(buffer)[fed:size])
            except BadRequest as exc:
                await self._send_error(400, f"bad request: {exc}")
                raise _Closed from None
            if end >= 0:
                del buffer[:size]
                return parser
            fed = size
            data = await self._receive_in_time()
            if not data:
                raise _Closed
            buffer += data

    async def _receive_chunk(self) -> bytes:
        try:
            return await self._io.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return b""
        except ssl.SSLError:
            raise _Closed from None

    async def _receive_in_time(self) -> bytes:
        """A read of the request's rest, within its phase's deadline."""
        by = self._by
        if by is not None and by.deadline != self._due:
            by.deadline = self._due
        return await self._receive_chunk()

    async def _more(self) -> None:
        """Read into the buffer; the client leaving mid-request ends the connection."""
        data = await self._receive_in_time()
        if not data:
            raise _Closed
        self._buffer += data

    def _is_websocket_upgrade(self, head: Head) -> bool:
        if self._server.upgrade_handler is None:
            return False
        value = head.header(b"upgrade")
        return value is not None and value.lower() == b"websocket"

    async def _upgrade(self, request: HttpRequest) -> None:
        handler = self._server.upgrade_handler
        assert handler is not None
        # What came after the head belongs to the WebSocket; the stream is handed over
        # as anyio made it (what the connection read and did not receive included).
        trailing, self._buffer = bytes(self._buffer), bytearray()
        io: SocketIO | None = self._io
        del self._io  # an idle WebSocket link holds this connection: not its spent I/O too
        # A handler that adopts the I/O takes it as it is; any other gets anyio's stream back.
        if io is not None and not getattr(handler, "adopts_io", False):
            io.release()
            io = None
        offered = offered_io.set(io)
        # The stream's layer reads why it was cancelled, if the pools closed it.
        reset = current_slot.set(self._slot)
        try:
            await handler(self._stream, request, trailing)
        finally:
            current_slot.reset(reset)
            offered_io.reset(offered)

    async def _read_body(self, parser: RequestParser) -> bytes | None:
        limit = self._config.max_body_size
        head = parser.head
        if head.chunked:
            return await self._read_chunked(parser)
        length = head.length or 0
        if length > limit:
            await self._send_error(413, f"body of {length} bytes exceeds the {limit}-byte limit")
            return None
        buffer = self._buffer
        while len(buffer) < length:
            await self._more()
        body = bytes(buffer[:length])
        del buffer[:length]
        return body

    async def _read_chunked(self, parser: RequestParser) -> bytes | None:
        """A chunked body, through llhttp; a request sent behind it in the same read
        cannot be told apart from it, so the connection closes after this answer."""
        limit = self._config.max_body_size
        while True:
            data, self._buffer = bytes(self._buffer), bytearray()
            try:
                parser.feed_body(data)
            except BadRequest as exc:
                await self._send_error(400, f"bad request: {exc}")
                return None
            if parser.body_size > limit:
                await self._send_error(413, f"body exceeds the {limit}-byte limit")
                return None
            if parser.complete:
                if parser.overran:
                    self._keep_alive = False
                return b"".join(parser.body)
            await self._more()

    async def _respond_while_connected(self, request: HttpRequest) -> HttpResponse | None:
        """The handler's answer, or None if the client hung up first.

        A caller that goes away must not leave its work running (a tool call can take
        minutes): while the handler runs, the connection is watched, and its end cancels
        the handler. Bytes that arrive instead (a pipelined next request) are kept for
        the next cycle and the watch stops, since the client is plainly still there.
        """
        if self._buffer:
            return await self._respond(request)  # more requests already came: it is there
        if not self._io.watches_hang_up:
            return await self._respond_reading(request)
        return await self._respond_watched(request)

    async def _respond_watched(self, request: HttpRequest) -> HttpResponse | None:
        """The handler runs in the connection's own task, under a cancel scope that the
        I/O cancels if the client leaves (asyncio's transport tells it; on trio the
        connection's reading task, :class:`ReadAheadIO`): no task, no task group per
        request. A connection closed from outside cancels the handler as it would a task
        group's, through its scopes, so its shields hold (a room being created is finished
        even if its creator left)."""
        scope = self._loop.cancel_scope()
        self._io.watch_hang_up(scope.cancel)  # False: bytes wait, the client is there
        try:
            with scope:
                return await self._respond(request)
        finally:
            self._io.watch_hang_up(None)
        log.info("http.client_left", client=self._client, path=request.path)
        return None

    async def _respond_reading(self, request: HttpRequest) -> HttpResponse | None:
        """The handler in a task while this one reads the connection (TLS): trio's own
        nursery on trio, not anyio's group (whose ``start_soon`` adds a scope and an
        event per task)."""
        answer: list[HttpResponse] = []
        async with self._loop.task_group() as tg:

            async def respond() -> None:
                answer.append(await self._respond(request))
                tg.cancel_scope.cancel()

            tg.start_soon(respond)
            data = await self._receive_chunk()
            if not data:
                log.info("http.client_left", client=self._client, path=request.path)
                tg.cancel_scope.cancel()
            else:
                self._buffer += data
        return answer[0] if answer else None

    async def _respond(self, request: HttpRequest) -> HttpResponse:
        try:
            return await self._server.handler(request)
        except Exception:
            # Logged with its traceback for us; the client gets no stack trace.
            log.exception("http.handler_crashed", method=request.method, path=request.path)
            return HttpResponse.error(500, "internal error (see the server log)")

    async def _write(self, data: bytes, *, timeout: float | None = None) -> None:
        """Write ``data``; wait only while the socket has no room for it, ``timeout`` at
        most (a client that does not read its answers must not pin the connection)."""
        try:
            if self._io.write(data):
                return
            if timeout is None:
                await self._io.drain()
                return
            with anyio.move_on_after(timeout) as stalled:
                await self._io.drain()
        except _GONE:
            raise _Closed from None
        if stalled.cancelled_caught:
            log.info("http.client_not_reading", client=self._client, after=timeout)
            raise _Closed

    async def _send(self, response: HttpResponse, *, head_only: bool = False) -> None:
        headers = [
            (b"content-type", response.content_type.encode()),
            (b"content-length", b"%d" % len(response.body)),
            *((k.encode(), v.encode()) for k, v in response.headers),
        ]
        try:
            data = response_head(response.status, headers, close=not self._keep_alive)
        except ValueError:
            log.error("http.bad_response_header", client=self._client, status=response.status)
            data = response_head(500, [(b"content-length", b"0")], close=True)
            self._keep_alive = False
            head_only = True
        self._answering = True
        # HEAD: the headers of the answer GET would get, and no body (RFC 9110, 9.3.2).
        body = b"" if head_only else response.body
        await self._write(data + body if body else data, timeout=self._config.request_timeout)

    async def _send_stream(
        self,
        response: HttpResponse,
        produce: Callable[[BodyWriter], Awaitable[None]],
        head_only: bool,
    ) -> None:
        """The head, then each piece ``produce`` writes (chunked), then the end.

        An HTTP/1.0 client knows no chunks: its body ends with the connection.
        """
        chunked = self._keep_alive
        headers = [
            (b"content-type", response.content_type.encode()),
            (b"cache-control", b"no-store"),
            *((k.encode(), v.encode()) for k, v in response.headers),
        ]
        if chunked:
            headers.append((b"transfer-encoding", b"chunked"))
        try:
            head = response_head(response.status, headers, close=not chunked)
        except ValueError:
            log.error("http.bad_response_header", client=self._client, status=response.status)
            raise _Closed from None
        timeout = self._config.request_timeout
        self._answering = True

        async def write(data: bytes) -> None:
            if not data:
                return
            with anyio.move_on_after(timeout) as stalled:
                await self._write(chunk(data) if chunked else data)
            if stalled.cancelled_caught:
                log.info("http.client_not_reading", client=self._client, after=timeout)
                raise _Closed

        with anyio.move_on_after(timeout):
            await self._write(head)
        if head_only:
            return
        try:
            await self._produce_while_connected(produce, write)
        except _Closed:
            raise
        except Exception:
            # Half an answer is out: the client learns only that the stream ended early.
            log.exception("http.stream_crashed", client=self._client)
            raise _Closed from None
        if not chunked:
            raise _Closed  # the end of the connection is the end of the body
        with anyio.move_on_after(timeout):
            await self._write(LAST_CHUNK)

    async def _produce_while_connected(
        self, produce: Callable[[BodyWriter], Awaitable[None]], write: BodyWriter
    ) -> None:
        """Run ``produce``, ended (``_Closed``) if the client hangs up first.

        A stream may write nothing for minutes (a tool call that reports no progress),
        and only a write would otherwise find the client gone: the connection is read
        meanwhile, as while a plain answer is made, so the work stops with its caller.
        """
        if self._buffer:
            await produce(write)  # more requests already came: it is there
            return
        left = False
        with unwrap_single_error():
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    await produce(write)
                    tg.cancel_scope.cancel()

                tg.start_soon(run)
                data = await self._receive_chunk()
                if data:
                    self._buffer += data  # a pipelined request: kept, run goes on
                else:
                    left = True
                    tg.cancel_scope.cancel()
        if left:
            log.info("http.client_left", client=self._client, streaming=True)
            raise _Closed

    async def _send_error(self, status: int, message: str, **extra: Any) -> None:
        if self._answering:
            return
        self._answering = True
        log.info("http.rejected", status=status, reason=message, client=self._client)
        response = HttpResponse.error(status, message, **extra)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(response.body)),
        ]
        data = response_head(status, headers, close=True) + response.body
        with anyio.move_on_after(1), suppress(*_GONE):
            if not self._io.write(data):
                await self._io.drain()


def _headers(head: Head) -> tuple[tuple[str, str], ...]:
    return tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers)


class HttpServer:
    """Serves HTTP (and WebSocket upgrades) on one listener until cancelled."""

    def __init__(
        self,
        listener: anyio.abc.Listener[anyio.abc.ByteStream],
        handler: HttpHandler,
        *,
        upgrade_handler: UpgradeHandler | None = None,
        config: HttpServerConfig | None = None,
        host: str,
        port: int,
        secure: bool,
        vouch: Vouch | None = None,
    ) -> None:
        self.listener = listener
        self.handler = handler
        self.upgrade_handler = upgrade_handler
        self.config = config = config or HttpServerConfig()
        self.vouch = vouch
        self.admission = Admission(
            strangers=config.max_unauthenticated_connections if vouch else None,
            known=config.max_connections,
            reserved=config.reserved_connections,
            per_holder=config.max_connections_per_identity,
        )
        self.host = host
        self.port = port
        self.secure = secure
        self.connections = 0
        #: Connections turned away with 503 because max_connections were open.
        self.refused_connections = 0
        self._last_busy_log = float("-inf")
        #: Requests being handled right now (not idle keep-alive connections).
        self.active_requests = 0
        self._accepting = anyio.CancelScope()
        self._all = anyio.CancelScope()
        #: Each connection's scope: the running loop's own once serving (no backend lookup).
        self._new_scope: Callable[[], Scope] = anyio.CancelScope
        self._idle = anyio.Event()
        self._connection_closed = anyio.Event()

    @property
    def url(self) -> str:
        return f"{'https' if self.secure else 'http'}://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"{'wss' if self.secure else 'ws'}://{self.host}:{self.port}"

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._new_scope = current_loop().cancel_scope
        with self._all:
            async with anyio.create_task_group() as connections:
                task_status.started()
                with self._accepting:
                    await serve_listener(self.listener, self._handle, connections)
                # No longer accepting: the port closes at once, so a new connection is
                # refused (its client knows nothing ran) instead of waiting in the backlog
                # to be reset later. Connections already open carry on until cancelled.
                with anyio.CancelScope(shield=True):
                    await self.listener.aclose()
                await anyio.sleep_forever()

    def stop_accepting(self) -> None:
        """Refuse new connections (the port closes); those already open carry on (see
        :meth:`drain`)."""
        self._accepting.cancel()

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for requests in progress to finish; True if they all did."""
        with anyio.move_on_after(timeout):
            while self.active_requests:
                self._idle = anyio.Event()
                await self._idle.wait()
            return True
        return False

    async def wait_connections(self, at_most: int = 0) -> None:
        """Until no more than ``at_most`` connections are open (bound it with a deadline)."""
        while self.connections > at_most:
            await self._connection_closed.wait()

    def close_all(self) -> None:
        """Cancel every connection (idle keep-alives, WebSockets, stragglers)."""
        self._all.cancel()

    def _request_started(self) -> None:
        self.active_requests += 1

    def _request_finished(self) -> None:
        self.active_requests -= 1
        if not self.active_requests:
            self._idle.set()

    def _room_for(self) -> tuple[Slot | None, str]:
        """A slot for a new connection, or the setting that says there is none."""
        config = self.config
        if self.vouch is None or config.max_unauthenticated_connections is None:
            # One pool for all (plus the reserved slots, which a vouched request may take).
            total = config.max_connections + (config.reserved_connections if self.vouch else 0)
            if self.connections >= total:
                return None, "max_connections"
        return self.admission.enter(self._new_scope), "max_unauthenticated_connections"

    async def _handle(self, stream: anyio.abc.ByteStream) -> None:
        client = _peer_name(stream)
        slot, setting = self._room_for()
        if slot is None:
            await self._refuse_busy(stream, client, setting)
            return
        self.connections += 1
        try:
            with slot.scope:
                await _HttpConnection(stream, self, client, slot).run()
        except Exception:
            # One connection's failure stays in that connection: the server keeps serving.
            log.exception("http.connection_failed", client=client)
        finally:
            self.admission.leave(slot)
            self.connections -= 1
            self._connection_closed.set()
            self._connection_closed = anyio.Event()

    async def _refuse_busy(self, stream: anyio.abc.ByteStream, client: str, setting: str) -> None:
        """503 and close: one log line per second of refusals, not one per refusal."""
        self.refused_connections += 1
        limit = getattr(self.config, setting)
        now = anyio.current_time()
        if now - self._last_busy_log >= 1.0:
            self._last_busy_log = now
            log.warning(
                "http.too_many_connections",
                limit=limit,
                setting=setting,
                refused=self.refused_connections,
                client=client,
            )
        body = json.dumps(
            {
                "error": {
                    "status": 503,
                    "message": f"too many connections: {limit} are open ({setting})",
                    "limit": setting,
                }
            }
        ).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\nretry-after: 1\r\n\r\n"
        )
        with (
            anyio.move_on_after(1),
            suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError),
        ):
            await stream.send(head.encode() + body)
        await anyio.aclose_forcefully(stream)


def _peer_name(stream: anyio.abc.ByteStream) -> str:
    # asyncio's transport asked the socket once when it was made: not again (anyio's
    # `extra` builds its table of every attribute and calls getpeername() per lookup).
    transport = getattr(stream, "_transport", None)
    address = transport.get_extra_info("peername") if transport is not None else None
    sock = None
    if address is None and isinstance(stream, anyio.abc.SocketStream):
        sock = raw_socket(stream)
    if sock is not None:  # trio's: asked once, without anyio's table
        try:
            address = sock.getpeername()
        except OSError:
            return "?"
    elif address is None:
        try:
            address = stream.extra(anyio.abc.SocketAttribute.remote_address)
        except anyio.TypedAttributeLookupError:
            return "?"
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address)


@asynccontextmanager
async def open_http_server(
    handler: HttpHandler,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    upgrade_handler: UpgradeHandler | None = None,
    ssl_context: ssl.SSLContext | None = None,
    config: HttpServerConfig | None = None,
    vouch: Vouch | None = None,
) -> AsyncIterator[HttpServer]:
    """Listen on ``host:port`` (0 picks a free port) for the duration of the block."""
    tcp = await anyio.create_tcp_listener(local_host=host, local_port=port)
    bound_port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    listener: anyio.abc.Listener[Any] = (
        TLSListener(tcp, ssl_context, standard_compatible=False) if ssl_context else tcp
    )
    server = HttpServer(
        listener,
        handler,
        upgrade_handler=upgrade_handler,
        config=config,
        host=host,
        port=bound_port,
        secure=ssl_context is not None,
        vouch=vouch,
    )
    try:
        with unwrap_single_error():
            async with anyio.create_task_group() as tg:
                await tg.start(server.serve)
                try:
                    yield server
                finally:
                    tg.cancel_scope.cancel()
    finally:
        # Only now: closing it under a pending accept() would raise in the serve task.
        with anyio.CancelScope(shield=True):
            await listener.aclose()
