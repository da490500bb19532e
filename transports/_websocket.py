"""WebSocket frame streams: websockets' sans-I/O protocol driven over anyio byte streams.

One implementation for asyncio and trio, dialling and accepting alike. We chose
websockets' sans-I/O core over its asyncio and trio front-ends because (1) one code
path serves both event loops, (2) the accepting side shares a listener with our
HTTP server, so the daemon serves its API and ``/ws`` on one port, and (3) we
control reads, writes and batching ourselves (one writer that sends whatever queued
meanwhile in one write; no task switch per message).
permessage-deflate is off: it costs ~28 µs per round trip and 3x the memory per
connection, and agent messages are small.

Sizes: a message over ``max_frame_size`` is dropped and reported as
:class:`FrameTooLarge` (the mesh answers it with an error and the link stays up);
a frame over ``hard_max_size`` is not even read: the connection closes with 1009.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from http import HTTPStatus
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import anyio
import anyio.abc
from websockets.exceptions import InvalidURI
from websockets.frames import Frame, Opcode
from websockets.headers import build_authorization_basic, build_host
from websockets.protocol import CLIENT, SERVER, Protocol, State
from websockets.uri import WebSocketURI, parse_uri

from transports._admission import eviction
from transports._auth import TokenAuthenticator, bearer_token, protocol_token
from transports._base import (
    DEFAULT_MAX_FRAME_SIZE,
    CloseCode,
    FrameTooLarge,
    TransportClosed,
    TransportInfo,
)
from transports._groups import unwrap_single_error
from transports._http_messages import HttpRequest
from transports._logging import get_logger
from transports._loop import StreamLock, current_loop
from transports._sockets import SocketIO, adopts_io, connect_tcp, offered_io, socket_io
from transports._ws_handshake import (
    MAX_SWITCH_HEAD,
    BadResponse,
    Refusal,
    Switched,
    check_switch,
    check_upgrade,
    new_key,
    refusal_response,
    switching_response,
    upgrade_request,
)

if TYPE_CHECKING:  # a client (``mesh mcp``) never loads the HTTP server
    from transports._http_server import UpgradeHandler

__all__ = [
    "CloseCode",
    "ConnectFailed",
    "WebSocketConfig",
    "WebSocketStream",
    "open_websocket",
    "websocket_upgrade_handler",
]

log = get_logger("transports.websocket")

_HEAD: Final = 512
#: What an offer's value may be (an id, a version): short and printable, so that
#: echoing it in the 101 response cannot split or bloat the headers.
_OFFER_VALUE: Final = re.compile(r"[!-~]{1,128}")
_NO_OFFERS: Final[Mapping[str, str]] = MappingProxyType({})
#: websockets' own loggers, looked up once: each protocol it makes otherwise looks its
#: side's up by name (under logging's lock), and a server makes two per link.
_CLIENT_LOG: Final = logging.getLogger("websockets.client")
_SERVER_LOG: Final = logging.getLogger("websockets.server")


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _check_utf8(frame: bytes) -> None:
    try:
        frame.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"a WebSocket frame is sent as text and must be UTF-8: {exc.reason} at byte {exc.start}"
        ) from None


class ConnectFailed(TransportClosed):
    """Dialling failed: refused, unreachable, TLS or WebSocket handshake rejected."""


@dataclass(frozen=True, slots=True)
class WebSocketConfig:
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: Frames larger than this are not read at all (close 1009); default 4 x max_frame_size.
    hard_max_size: int | None = None
    #: Send a WebSocket ping this often to find dead TCP peers; None turns it off.
    ping_interval: float | None = 20.0
    #: ...and give up on the peer if the pong takes longer than this.
    ping_timeout: float = 20.0
    #: How long closing waits for the peer's half of the close handshake.
    close_timeout: float = 2.0
    #: Dial: TCP + TLS + WebSocket handshake must finish within this.
    connect_timeout: float = 10.0

    @property
    def hard_limit(self) -> int:
        return self.hard_max_size or max(4 * self.max_frame_size, 4 << 20)


class WebSocketStream:
    """A :class:`~transports.FrameStream` over one WebSocket connection (either side)."""

    #: The handshake's offers both sides took up (header name, lower case -> value): see
    #: ``offers`` in :func:`open_websocket` and :func:`websocket_upgrade_handler`.
    #: Shared and empty unless some were: an idle link holds nothing for it.
    offers: Mapping[str, str] = _NO_OFFERS
    #: The accepting side's 101 response while it waits to go out in the same write as
    #: the handler's first frame (see :func:`websocket_upgrade_handler`); empty once sent.
    _held: bytes = b""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        protocol: Protocol,
        *,
        info: TransportInfo,
        config: WebSocketConfig,
        io: SocketIO | None = None,
    ) -> None:
        self._stream = stream
        self._protocol = protocol
        self._info = info
        self._config = config
        # A list read from an index, not a deque: a deque's first block alone is 600
        # bytes, a lot for an idle link (the list is cleared once read out).
        self._ready: list[bytes | FrameTooLarge] = []
        self._ready_at = 0
        self._fragments: list[bytes] = []
        self._fragment_size = 0
        self._fragment_tail = b""  # an oversized message's last bytes (its id may be there)
        self._text = True  # the message being assembled began with a TEXT frame
        self._closed: TransportClosed | None = None
        self._closing = False
        # The read or send right after an uncontended acquire is a checkpoint of its
        # own: skipping the acquire's saves one per message (profiled: anyio checkpoints
        # were a quarter of a sequential call's CPU).
        self._read_lock = StreamLock()
        self._write_lock = StreamLock()
        #: Writes that need no task switch where the socket has room (see transports._sockets).
        self._io = socket_io(stream) if io is None else io
        self._written = True  # all that was written has left (else drain before returning)
        self._eof = False  # the protocol asked for the TCP connection to end
        self._pong: anyio.Event | None = None  # made by the keepalive
        #: On the accepting side, the path and query the client asked for.
        self.request_target = ""

    @property
    def info(self) -> TransportInfo:
        return self._info

    @property
    def max_frame_size(self) -> int:
        return self._config.max_frame_size

    @property
    def close_code(self) -> int | None:
        received = self._protocol.close_rcvd
        return received.code if received is not None else self._protocol.close_code

    # -- sending ---------------------------------------------------------------------

    async def send(self, frame: bytes) -> None:
        await self.send_many((frame,))

    async def send_many(self, frames: Sequence[bytes]) -> None:
        self._queue(frames)
        await self._flush()

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Frame ``frames`` and write them now if the socket takes them; False: the rest
        goes out with the next ``send_many`` (a write is in flight, the socket is full,
        or the connection is TLS, whose writes always wait)."""
        self._queue(frames)
        return self._write_nowait()

    def _queue(self, frames: Sequence[bytes]) -> None:
        if self._closed is not None:
            raise self._closed
        if self._protocol.state is not State.OPEN:
            raise self._mark_closed()
        send_text = self._protocol.send_text
        for frame in frames:
            if not frame.isascii():
                _check_utf8(frame)  # a peer would close with 1007: refuse it here
            send_text(frame)

    def _write_nowait(self) -> bool:
        """Write what the protocol has framed, in order, without waiting.

        True when everything written so far has left; False when some waits for the
        socket (or, on TLS, for ``_flush``), which must then drain it.
        """
        chunks = self._protocol.data_to_send()
        if self._held:  # the handshake's response goes first, with what follows it
            chunks.insert(0, self._held)
            del self._held  # back to the class's empty default
        if chunks:
            if chunks[-1] == b"":  # the protocol asks for the TCP connection to end
                self._eof = True
                chunks.pop()
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if data:
                try:
                    self._written = self._io.write(data)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                    raise self._mark_closed(f"connection lost while sending: {exc!r}") from None
        return self._written and not self._eof

    async def _flush(self) -> None:
        """Write everything queued, waiting for the socket as long as it takes."""
        if self._write_nowait():
            return
        async with self._write_lock:
            self._write_nowait()  # what was framed while we waited for the gate
            try:
                await self._io.drain()
                self._written = True
                if self._eof:
                    self._eof = False
                    await self._io.aclose()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise self._mark_closed(f"connection lost while sending: {exc!r}") from None

    # -- receiving -------------------------------------------------------------------

    async def receive(self) -> bytes:
        ready = self._ready
        while True:
            if ready:
                item = ready[self._ready_at]
                self._ready_at += 1
                if self._ready_at == len(ready):
                    ready.clear()
                    self._ready_at = 0
                if type(item) is bytes:
                    return item
                raise item  # type: ignore[misc]
            if self._closed is not None:
                raise self._closed
            async with self._read_lock:
                if not ready and self._closed is None:
                    await self._read_some()

    async def _read_some(self) -> None:
        if self._held:  # a handler that reads before it writes: its client waits for the 101
            with suppress(TransportClosed):
                await self._flush()
        try:
            data = await self._io.receive()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, ssl.SSLError) as exc:
            self._protocol.receive_eof()
            self._mark_closed(f"connection lost: {exc!r}")
        else:
            if data:
                self._protocol.receive_data(data)
            else:
                self._protocol.receive_eof()
        self.process_events()
        with suppress(TransportClosed):
            await self._flush()  # pongs, our half of a close handshake

    def process_events(self) -> None:
        """Move what the protocol parsed into the frame queue."""
        for event in self._protocol.events_received():
            if isinstance(event, Frame) and not self._handle_frame(event):
                break  # the connection failed: nothing after the bad frame counts
        if self._protocol.state in (State.CLOSING, State.CLOSED):
            self._mark_closed()  # no data frame follows a close frame

    def _handle_frame(self, frame: Frame) -> bool:
        """Queue what a data frame completes; False if it failed the connection."""
        opcode = frame.opcode
        if opcode is Opcode.PONG:
            if self._pong is not None:
                self._pong.set()
            return True
        if opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
            return True  # pings are answered by the protocol; close is handled by its state
        if opcode is not Opcode.CONT:
            self._fragments.clear()
            self._fragment_size = 0
            self._fragment_tail = b""
            self._text = opcode is Opcode.TEXT
        before = self._fragment_size
        self._fragment_size += len(frame.data)
        limit = self._config.max_frame_size
        if self._fragment_size <= limit:
            self._fragments.append(bytes(frame.data))
        else:
            if before <= limit:  # this frame crosses the limit: keep only the ends from now on
                kept = b"".join(self._fragments)
                self._fragments = [(kept + bytes(frame.data[:_HEAD]))[:_HEAD]]
                self._fragment_tail = kept[-_HEAD:]
            tail = self._fragment_tail + bytes(frame.data[-_HEAD:])
            self._fragment_tail = tail[-_HEAD:]
        if not frame.fin:
            return True
        size = self._fragment_size
        message = b"".join(self._fragments)
        tail, self._fragment_tail = self._fragment_tail, b""
        self._fragments.clear()
        self._fragment_size = 0
        if size > limit:
            # Dropped unread, so not checked for UTF-8 either: only its ends were kept.
            self._ready.append(FrameTooLarge(size, limit, message[:_HEAD], tail))
        elif self._text and not message.isascii() and not _is_utf8(message):
            self._fail(CloseCode.INVALID_DATA, "invalid UTF-8 in a text frame")
            return False
        else:
            self._ready.append(message)
        return True

    def _fail(self, code: CloseCode, reason: str) -> None:
        """Fail the connection (RFC 6455 7.1.7): the close frame goes out with the next flush."""
        log.info("websocket.failed", peer=self._info.peer, code=int(code), reason=reason)
        self._protocol.fail(code, reason)
        self._mark_closed(f"closed with code {int(code)} ({reason})", code=code)

    def _mark_closed(self, why: str | None = None, *, code: int | None = None) -> TransportClosed:
        if self._closed is None:
            protocol = self._protocol
            # The peer's close frame, as soon as it arrived (``close_code`` waits for CLOSED).
            received = protocol.close_rcvd
            if code is None:
                code = received.code if received is not None else protocol.close_code
            if why is None:
                reason = received.reason if received is not None else ""
                if code is None:
                    why = "connection closed without a close frame"
                else:
                    why = f"closed with code {code}" + (f" ({reason})" if reason else "")
            self._closed = TransportClosed(why, close_code=code)
        return self._closed

    # -- keepalive and closing ---------------------------------------------------------

    async def keepalive(self) -> None:
        """Ping every ``ping_interval``; close with 1011 if a pong is late. Run it in a task."""
        interval = self._config.ping_interval
        if interval is None:
            return
        while self._closed is None and not self._closing:
            await anyio.sleep(interval)
            if self._closed is not None or self._protocol.state is not State.OPEN:
                return
            pong = self._pong = anyio.Event()
            self._protocol.send_ping(os.urandom(4))
            # The timeout covers sending the ping too: a peer that stopped reading
            # fills its socket buffer, and then the write itself never returns.
            with anyio.move_on_after(self._config.ping_timeout):
                try:
                    await self._flush()
                except TransportClosed:
                    return
                await pong.wait()
                continue
            log.warning(
                "websocket.ping_timeout", peer=self._info.peer, after=self._config.ping_timeout
            )
            await self.aclose(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
            self._closed = TransportClosed(
                f"no pong within {self._config.ping_timeout:g} s (keepalive ping timeout)",
                close_code=CloseCode.INTERNAL_ERROR,
            )
            return

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close handshake (bounded by ``close_timeout``), then the socket."""
        if self._closing:
            return
        self._closing = True
        with anyio.CancelScope(shield=True):
            protocol = self._protocol
            # The whole handshake, our write included, is bounded: a peer that does
            # not read would otherwise keep this (shielded) write waiting for ever.
            with anyio.move_on_after(self._config.close_timeout):
                if protocol.state is State.OPEN:
                    protocol.send_close(code, reason)
                with suppress(TransportClosed):
                    await self._flush()  # our close frame, or one a failure queued
                async with self._read_lock:
                    while protocol.state is not State.CLOSED and self._closed is None:
                        await self._read_some()
            self._mark_closed(
                f"closed locally with code {code}" + (f" ({reason})" if reason else "")
            )
            await self._io.aclose()


async def _switch_reply(io: SocketIO, shown: str) -> tuple[bytes, bytes]:
    """The server's response head (without its blank line), and what came after it in
    the same reads (frames); at most ``MAX_SWITCH_HEAD`` bytes are read for the head."""
    buffer = b""
    while True:
        data = await io.receive()
        if not data:
            raise ConnectFailed(f"connection to {shown} closed during the WebSocket handshake")
        buffer += data
        end = buffer.find(b"\r\n\r\n")
        if end >= 0 and end + 4 <= MAX_SWITCH_HEAD:
            return buffer[:end], buffer[end + 4 :]
        if end >= 0 or len(buffer) >= MAX_SWITCH_HEAD:
            raise ConnectFailed(
                f"WebSocket handshake with {shown} failed: "
                f"response head exceeds {MAX_SWITCH_HEAD} bytes"
            )


@asynccontextmanager
async def open_websocket(
    url: str,
    *,
    token: str | None = None,
    token_in_query: bool = False,
    headers: Sequence[tuple[str, str]] = (),
    offers: Sequence[tuple[str, str]] = (),
    ssl_context: ssl.SSLContext | None = None,
    config: WebSocketConfig | None = None,
) -> AsyncIterator[WebSocketStream]:
    """Dial ``ws://`` or ``wss://`` and yield the frame stream.

    The token goes in ``Authorization: Bearer`` (or ``?token=`` with
    ``token_in_query``, as browsers must). Raises :class:`ConnectFailed` naming the
    URL and cause when the TCP, TLS or WebSocket handshake fails.

    ``offers`` are request headers proposing something the server may take up
    (see :func:`websocket_upgrade_handler`): the ones its 101 response echoes
    with the same value are in the stream's ``offers``; a server that knows
    none of them ignores them, as HTTP does any header it does not know.
    """
    config = config or WebSocketConfig()
    bearer = token
    if token and token_in_query:
        url += ("&" if "?" in url else "?") + f"token={token}"
        bearer = None
    uri = _parse_ws_url(url)
    shown = url.split("?", 1)[0]  # never log a token from the query
    own = _request_headers(uri, bearer, headers, offers)
    key = new_key()
    request = upgrade_request(_host(uri), uri.resource_name, key, own)
    tls = _client_tls(uri, ssl_context)
    stream, io, head, rest = await _dial(uri, request, tls, config.connect_timeout, shown)
    offered = [value for name, value in own if name.lower() == "sec-websocket-protocol"]
    switched = await _require_accepted(stream, head, key, offered, shown)
    protocol = Protocol(CLIENT, state=State.OPEN, max_size=config.hard_limit, logger=_CLIENT_LOG)
    info = TransportInfo("websocket", shown)
    ws = WebSocketStream(stream, protocol, info=info, config=config, io=io)
    _take_handshake(ws, switched, rest, offers)
    if config.ping_interval is not None:
        async with _keeping_alive(ws):
            yield ws
        return
    try:  # no keepalive: _keeping_alive's block without its generator (one per link)
        yield ws
    finally:
        await ws.aclose(*_normally())


def _take_handshake(
    ws: WebSocketStream, switched: Switched, rest: bytes, offers: Sequence[tuple[str, str]]
) -> None:
    """Give ``ws`` the offers the server's 101 echoed and the frames that came with it."""
    taken = {
        name.lower(): value for name, value in offers if switched.header(name.lower()) == value
    }
    if taken:
        ws.offers = taken
    if rest:  # frames that arrived with the handshake (even a close)
        ws._protocol.receive_data(rest)
    ws.process_events()


def _parse_ws_url(url: str) -> WebSocketURI:
    try:
        # A peer dials the same few URLs again and again (a crowd, a reconnect): each
        # parsed once. One holding a secret (a query, user info) is parsed every time,
        # so that no token outlives its link in the cache.
        if "?" in url or "@" in url:
            return parse_uri(url)
        return _parse_plain_url(url)
    except InvalidURI as exc:
        raise ConnectFailed(f"not a WebSocket URL: {exc}") from None


@functools.lru_cache(maxsize=64)
def _parse_plain_url(url: str) -> WebSocketURI:
    """``parse_uri`` of a URL with no query and no user info; read, never changed."""
    return parse_uri(url)


def _client_tls(uri: WebSocketURI, ssl_context: ssl.SSLContext | None) -> ssl.SSLContext | None:
    """The caller's TLS context; the system's for ``wss://``; None for ``ws://``."""
    if ssl_context is not None:
        return ssl_context
    return ssl.create_default_context() if uri.secure else None


def _host(uri: WebSocketURI) -> str:
    """The ``Host`` header: the port only when it is not the scheme's default."""
    return build_host(uri.host, uri.port, uri.secure)


def _request_headers(
    uri: WebSocketURI,
    bearer: str | None,
    headers: Sequence[tuple[str, str]],
    offers: Sequence[tuple[str, str]],
) -> list[tuple[str, str]]:
    """The handshake request's own headers, in the order they are sent."""
    authorization = []
    if uri.user_info:  # ws://user:password@host/: HTTP Basic, as websockets sends it
        authorization.append(("Authorization", build_authorization_basic(*uri.user_info)))
    if bearer:
        authorization.append(("Authorization", f"Bearer {bearer}"))
    return [*authorization, *headers, *offers]


async def _dial(
    uri: WebSocketURI, request: bytes, context: ssl.SSLContext | None, timeout: float, shown: str
) -> tuple[anyio.abc.ByteStream, SocketIO, bytes, bytes]:
    """Connect, send the handshake request and read its response's head, within
    ``timeout``; a failure of TCP, TLS or the handshake is :class:`ConnectFailed`
    naming ``shown``. Returns the head and the bytes that followed it.

    The handshake goes through the I/O the link then keeps (see transports._sockets),
    not anyio's stream: on asyncio that is one takeover of the transport per link
    instead of a pause and a resume of its reading around each read, then the takeover.
    """
    # The loop's own scope with a deadline: what ``anyio.fail_after`` is, without its
    # generator and backend lookup (8.1 -> 4.3 us of CPU per dial on asyncio).
    loop = current_loop()
    within = loop.cancel_scope()
    within.deadline = loop.now() + timeout
    try:
        with within:
            stream = await _connect_tcp(uri, context)
            try:
                io = socket_io(stream)
                if not io.write(request):
                    await io.drain()
                head, rest = await _switch_reply(io, shown)
            except BaseException:
                await anyio.aclose_forcefully(stream)
                raise
    except (OSError, ssl.SSLError, anyio.BrokenResourceError) as exc:
        raise ConnectFailed(f"cannot connect to {shown}: {exc}") from None
    if within.cancelled_caught:
        raise _no_handshake(shown, timeout)
    return stream, io, head, rest


def _no_handshake(shown: str, timeout: float) -> ConnectFailed:
    return ConnectFailed(f"cannot connect to {shown}: no handshake within {timeout:g} s")


async def _connect_tcp(uri: WebSocketURI, context: ssl.SSLContext | None) -> anyio.abc.ByteStream:
    if context is None:
        return await connect_tcp(uri.host, uri.port)
    return await anyio.connect_tcp(
        uri.host,
        uri.port,
        ssl_context=context,
        tls_hostname=uri.host,
        tls_standard_compatible=False,
    )


async def _require_accepted(
    stream: anyio.abc.ByteStream, head: bytes, key: str, offered: Sequence[str], shown: str
) -> Switched:
    """The server's 101; else close ``stream`` and raise :class:`ConnectFailed` saying
    what the server answered, or which rule of the handshake its 101 broke."""
    try:
        switched = check_switch(head, key, offered)
    except BadResponse as exc:
        failed = f"the response is not HTTP/1.1 ({exc})"
    else:
        status = f"HTTP {switched.status} {switched.reason}"
        if switched.status == 101 and switched.broken is None:
            return switched
        failed = status if switched.broken is None else f"{status}, but {switched.broken}"
    await anyio.aclose_forcefully(stream)
    raise ConnectFailed(f"WebSocket handshake with {shown} failed: {failed}")


WebSocketHandler = Callable[[WebSocketStream, str | None], Awaitable[None]]


def _normally() -> tuple[int, str]:
    return CloseCode.NORMAL, ""


@asynccontextmanager
async def _keeping_alive(
    ws: WebSocketStream, closing: Callable[[], tuple[int, str]] = _normally
) -> AsyncIterator[None]:
    """Run ``ws``'s keepalive (if it pings at all) for the block; close ``ws`` after it,
    with the code and reason ``closing`` gives then."""
    if ws._config.ping_interval is None:  # no task (and no task group) for a link to hold
        try:
            yield
        finally:
            await ws.aclose(*closing())
        return
    with unwrap_single_error():
        async with anyio.create_task_group() as tg:
            tg.start_soon(ws.keepalive)
            try:
                yield
            finally:
                await ws.aclose(*closing())
                tg.cancel_scope.cancel()


async def _accept(
    stream: anyio.abc.ByteStream,
    request: HttpRequest,
    trailing: bytes,
    config: WebSocketConfig,
    paths: Sequence[str] | None,
    authenticator: TokenAuthenticator | None,
    offers: Sequence[str] = (),
    io: SocketIO | None = None,
) -> tuple[WebSocketStream, str | None] | None:
    """The server's half of the handshake: the stream and the token's agent id, or None
    when the connection was refused (404, a broken handshake, 4001, 4003) and is closed
    already."""
    # The server parsed the head once: the handshake is checked from that, and the 101
    # written from a template (see transports._ws_handshake).
    if paths is not None and request.path not in paths:
        checked: tuple[str, str | None] | Refusal = Refusal(
            404, f"no WebSocket endpoint at {request.path}"
        )
    else:
        checked = check_upgrade(request.method, request.version, request.headers)
    taken = _take_offers(request, offers) if offers else None
    if isinstance(checked, Refusal):
        log.info("websocket.refused", client=request.client, status=checked.status, why=checked.why)
        response = refusal_response(
            checked.status, HTTPStatus(checked.status).phrase, checked.why, checked.headers
        )
        opened = False
    else:
        response = switching_response(*checked, taken.items() if taken else ())
        opened = True
    # A taken offer is a frame the handler sends first thing: the 101 waits for it, so
    # both leave in one write and the client wakes once for them. Otherwise it goes now.
    held = opened and bool(taken)
    if io is None:
        io = socket_io(stream)
    if not held:
        try:
            if not io.write(response):
                await io.drain()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await anyio.aclose_forcefully(stream)
            return None
    if not opened:
        await anyio.aclose_forcefully(stream)
        return None
    protocol = Protocol(SERVER, state=State.OPEN, max_size=config.hard_limit, logger=_SERVER_LOG)
    ws = WebSocketStream(
        stream, protocol, info=TransportInfo("websocket", request.client), config=config, io=io
    )
    ws.request_target = request.target
    if taken:
        ws.offers = taken
    if held:
        ws._held = response
    if trailing:
        protocol.receive_data(trailing)
    agent_id = None
    if authenticator is not None:
        agent_id = authenticator.identify(
            bearer_token(
                request.header("authorization"),
                request.query_value("token")
                or protocol_token(request.header("sec-websocket-protocol")),
            )
        )
        if agent_id is None:
            log.info("websocket.unauthorized", client=request.client)
            await ws.aclose(CloseCode.UNAUTHORIZED, "Unauthorized")
            return None
        claimed = request.header("x-agent-id") or request.query_value("agent")
        if claimed is not None and claimed != agent_id:
            log.warning(
                "websocket.impersonation", client=request.client, claimed=claimed, agent=agent_id
            )
            await ws.aclose(CloseCode.FORBIDDEN, f"token does not belong to agent {claimed!r}")
            return None
    ws.process_events()
    return ws, agent_id


def _take_offers(request: HttpRequest, offers: Sequence[str]) -> dict[str, str]:
    """The offers in ``request`` this server takes up: each echoed in the 101 response."""
    taken = {}
    for name in offers:
        value = request.header(name)
        if value is not None and _OFFER_VALUE.fullmatch(value):
            taken[name.lower()] = value
    return taken


def websocket_upgrade_handler(
    handler: WebSocketHandler,
    *,
    authenticator: TokenAuthenticator | None,
    paths: Sequence[str] | None = ("/ws",),
    config: WebSocketConfig | None = None,
    offers: Sequence[str] = (),
) -> UpgradeHandler:
    """An upgrade handler for :func:`~transports.open_http_server` that accepts WebSockets.

    With an ``authenticator``, a connection without a valid token is closed with
    4001 before anything it sends is read; one whose ``X-Agent-Id`` header (or
    ``?agent=``) names another agent than its token is closed with 4003. The
    handler gets the stream and the agent id the token belongs to.

    ``offers`` names request headers this server takes up: one the client sent
    with a short printable value (at most 128 characters) is echoed in the 101
    response and is in the stream's ``offers``; what taking it up means is the
    handler's to honour. A handler given a taken offer answers with a frame first
    thing: its 101 response waits for that frame (or for the handler's first read,
    or the close) and leaves in the same write, one segment where there were two.
    """
    ws_config = config or WebSocketConfig()

    @adopts_io
    async def upgrade(stream: anyio.abc.ByteStream, request: HttpRequest, trailing: bytes) -> None:
        # The HTTP connection's I/O, taken over as it is (None: served some other way).
        io = offered_io.get()
        offered_io.set(None)
        accepted = await _accept(
            stream, request, trailing, ws_config, paths, authenticator, offers, io
        )
        client = request.client
        # Nothing of the handshake outlives it: an idle link keeps only what it uses.
        del request, trailing
        if accepted is None:
            return
        ws, agent_id = accepted
        # A link that does not ping (a mesh peer's heartbeats are its keepalive) gets
        # no keepalive task, and no task group either: an idle link holds what it uses.
        pinging = None if ws._config.ping_interval is None else _keeping_alive(ws, _closing_reason)
        try:
            if pinging is None:
                await handler(ws, agent_id)
            else:
                async with pinging:
                    await handler(ws, agent_id)
        except TransportClosed as closed:
            log.debug("websocket.closed", client=client, reason=closed.reason)
        finally:
            await ws.aclose(*_closing_reason())

    return upgrade


def _closing_reason() -> tuple[int, str]:
    """How a served stream ends: normally, or with 4029 naming the setting when the
    server's pools closed it to give another holder its share."""
    setting = eviction()
    if setting is None:
        return _normally()
    return CloseCode.TOO_MANY, f"closed to give other tokens their share of connections ({setting})"
