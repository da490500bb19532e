"""The HTTP transport's client side: each frame is one ``POST {endpoint}/rpc``.

The reply body (if any; 204 means none) is the next frame received. Every POST
runs in its own task over a small pool of keep-alive connections, so many calls
are in flight at once; h11 writes and parses the HTTP, anyio moves the bytes.
A connection failure ends the stream (the mesh's reconnect logic then decides
what to do); an HTTP error status for one POST surfaces as :class:`FrameRejected`
and an answer over the size limit as :class:`FrameTooLarge`, and the stream
carries on.

Not httpx: its per-request machinery costs about 1 ms of CPU per call here and
its pool collapses with 64 requests in flight (docs/transports.md has the numbers).
"""

from __future__ import annotations

import json
import math
import select
import socket
import ssl
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11

from transports._base import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameRejected,
    FrameTooLarge,
    TransportClosed,
    TransportError,
    TransportInfo,
)
from transports._groups import unwrap_single_error
from transports._sockets import shrink_reads

__all__ = ["HttpClientStream", "open_http_client"]

_HEAD: Final = 512
_READ_SIZE: Final = 64 * 1024
#: Dialling (and the TLS handshake) must finish within this. Nothing else has a
#: deadline of its own: the mesh's call deadline and heartbeat TTL bound a
#: request, and closing the stream cancels every POST still waiting.
CONNECT_TIMEOUT: Final = 10.0
#: As many connections as the mesh keeps calls in flight on a busy link.
DEFAULT_MAX_CONNECTIONS: Final = 64
_USER_AGENT: Final = b"agent-mesh"

#: What one POST hands the receiver: a frame, a refusal, or nothing (204).
_Outcome = bytes | TransportError | None


@dataclass(frozen=True, slots=True)
class _Origin:
    """Where the POSTs go, and the request head that never changes (built once)."""

    url: str
    host: str
    port: int
    tls: ssl.SSLContext | None
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]


def _origin(endpoint: str, token: str | None, ssl_context: ssl.SSLContext | None) -> _Origin:
    url = endpoint.rstrip("/") + "/rpc"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http:// or https:// endpoint: {endpoint!r}")
    if parts.username is not None:
        raise ValueError("credentials in the endpoint URL are not supported: pass token=")
    secure = parts.scheme == "https"
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = [
        (b"host", parts.netloc.encode("idna")),
        (b"user-agent", _USER_AGENT),
        (b"content-type", b"application/json"),
    ]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return _Origin(
        url=url,
        host=parts.hostname,
        port=parts.port or (443 if secure else 80),
        tls=(ssl_context or ssl.create_default_context()) if secure else None,
        target=target.encode(),
        headers=tuple(headers),
    )


class _Lost(Exception):
    """The connection failed under a request.

    ``unprocessed`` is true only when the server provably never acted on the
    request: the write failed, or the connection was reset (the server closed it
    with our request unread) before any byte of an answer.
    """

    def __init__(self, cause: str, *, unprocessed: bool) -> None:
        super().__init__(cause)
        self.unprocessed = unprocessed


class _Connection:
    """One keep-alive connection: its byte stream, its h11 state, and a liveness probe."""

    __slots__ = ("_poll", "_sock", "h11", "stream")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        shrink_reads(stream)  # asyncio's 256 KiB reads cost a mapping each
        self.h11 = h11.Connection(h11.CLIENT)
        self._sock: socket.socket | None = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        self._poll: select.poll | None = None
        if self._sock is not None and hasattr(select, "poll"):
            self._poll = select.poll()
            self._poll.register(self._sock.fileno(), select.POLLIN)

    def closed_by_server(self) -> bool:
        """True if this idle connection has anything to read: an EOF, a reset, or bytes
        nobody asked for. Either way it is no use for another request (urllib3 and
        httpcore check the same). anyio stops reading between receives, so on asyncio
        too whatever arrived is still in the socket."""
        sock = self._sock
        if sock is None:
            return False
        fd = sock.fileno()
        if fd < 0:
            return True
        if self._poll is not None:
            return bool(self._poll.poll(0))
        return bool(select.select((fd,), (), (), 0)[0])


class _Slots:
    """A FIFO semaphore whose waiters leave the line in O(1) when cancelled.

    (anyio's asyncio semaphore removes a cancelled waiter with a linear scan: closing
    a stream with thousands of queued POSTs would be quadratic.) A released slot
    goes straight to the first waiter; no checkpoint when one is free.
    """

    __slots__ = ("_free", "_line")

    def __init__(self, count: int) -> None:
        self._free = count
        self._line: OrderedDict[anyio.Event, None] = OrderedDict()

    async def acquire(self) -> None:
        if self._free and not self._line:
            self._free -= 1
            return
        turn = anyio.Event()
        self._line[turn] = None
        try:
            await turn.wait()
        except BaseException:
            if turn in self._line:
                del self._line[turn]  # gave up waiting
            else:
                self.release()  # handed a slot just as it was cancelled: pass it on
            raise

    def release(self) -> None:
        if self._line:
            self._line.popitem(last=False)[0].set()
        else:
            self._free += 1


class _Pool:
    """Up to ``max_connections`` keep-alive connections to one origin.

    A request takes a slot (waiting in line when all are busy), then the most
    recently used idle connection, or dials a new one. A reused connection that
    fails before the server could have acted on the request is retried once on a
    fresh one; nothing that may have been processed is ever sent twice.
    """

    def __init__(self, origin: _Origin, *, max_connections: int, max_body: int) -> None:
        self.origin = origin
        self._idle: list[_Connection] = []
        self._slots = _Slots(max_connections)
        self._max_body = max_body

    async def post(self, frame: bytes) -> _Outcome:
        """POST one frame: what to hand the receiver. Raises :class:`TransportClosed`."""
        await self._slots.acquire()
        try:
            conn = await self._take_idle()
            if conn is not None:
                try:
                    return await self._exchange(conn, frame)
                except _Lost as lost:
                    if not lost.unprocessed:
                        raise self._closed(lost) from lost
                    # The keep-alive race: the server dropped the connection as our
                    # request went out, unread. Once more, on a fresh connection.
            conn = await self._dial()
            try:
                return await self._exchange(conn, frame)
            except _Lost as lost:
                raise self._closed(lost) from lost
        finally:
            self._slots.release()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await anyio.aclose_forcefully(conn.stream)

    def _closed(self, lost: _Lost) -> TransportClosed:
        return TransportClosed(f"lost the connection to {self.origin.url}: {lost}")

    async def _take_idle(self) -> _Connection | None:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed_by_server():
                return conn
            await anyio.aclose_forcefully(conn.stream)
        return None

    async def _dial(self) -> _Connection:
        origin = self.origin
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                if origin.tls is None:
                    stream: anyio.abc.ByteStream = await anyio.connect_tcp(origin.host, origin.port)
                else:
                    # Not standard_compatible: HTTP frames its own messages, so a
                    # close without TLS close_notify truncates nothing.
                    stream = await anyio.connect_tcp(
                        origin.host,
                        origin.port,
                        ssl_context=origin.tls,
                        tls_hostname=origin.host,
                        tls_standard_compatible=False,
                    )
        except TimeoutError:
            raise TransportClosed(
                f"cannot reach {origin.url}: no connection within {CONNECT_TIMEOUT:g} s"
            ) from None
        except (OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            raise TransportClosed(f"cannot reach {origin.url}: {_why(exc)}") from exc
        return _Connection(stream)

    async def _exchange(self, conn: _Connection, frame: bytes) -> _Outcome:
        """One request and its answer; the connection goes back idle or is closed."""
        reusable = False
        try:
            outcome, reusable = await self._round_trip(conn, frame)
            return outcome
        finally:
            if reusable:
                self._idle.append(conn)
            else:
                await anyio.aclose_forcefully(conn.stream)

    async def _round_trip(self, conn: _Connection, frame: bytes) -> tuple[_Outcome, bool]:
        origin = self.origin
        state = conn.h11
        head = h11.Request(
            method=b"POST",
            target=origin.target,
            headers=[*origin.headers, (b"content-length", b"%d" % len(frame))],
        )
        data = b"".join(
            state.send(event) or b"" for event in (head, h11.Data(data=frame), h11.EndOfMessage())
        )
        try:
            await conn.stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise _Lost(f"the request could not be sent ({_why(exc)})", unprocessed=True) from exc
        return await self._read_answer(conn, frame)

    async def _read_answer(self, conn: _Connection, frame: bytes) -> tuple[_Outcome, bool]:
        state, receive = conn.h11, conn.stream.receive
        answered = False  # any byte of an answer yet
        status, reason, expected = 0, b"", -1
        chunks: list[bytes] = []
        size = 0
        ended = False  # the server closed its side
        while True:
            try:
                event = state.next_event()
            except h11.RemoteProtocolError as exc:
                what = "disconnected mid-answer" if ended else "broke HTTP/1.1"
                raise _Lost(f"the server {what} ({exc})", unprocessed=False) from exc
            if event is h11.NEED_DATA:
                try:
                    data = await receive(_READ_SIZE)
                except anyio.EndOfStream:
                    data = b""
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                    raise _Lost(
                        f"the server disconnected ({_why(exc)})", unprocessed=not answered
                    ) from exc
                if not data and not answered:
                    raise _Lost("the server disconnected before answering", unprocessed=False)
                answered, ended = True, not data
                state.receive_data(data)
            elif type(event) is h11.Data:
                size += len(event.data)
                chunks.append(event.data)
                if size > self._max_body or (size >= _HEAD and expected > self._max_body):
                    # Over the limit: keep the head (to name the call), drop the rest
                    # along with the connection rather than read it.
                    size = max(size, expected)
                    return self._oversized(status, reason, chunks, size, frame), False
            elif type(event) is h11.Response:
                status, reason = event.status_code, event.reason
                expected = _content_length(event.headers)
            elif type(event) is h11.EndOfMessage:
                break
            elif type(event) is h11.ConnectionClosed:
                raise _Lost("the server disconnected mid-answer", unprocessed=False)
            # InformationalResponse (1xx): the real answer follows.
        reusable = state.our_state is h11.DONE and state.their_state is h11.DONE
        if reusable:
            state.start_next_cycle()
        body = b"".join(chunks)
        if status == 200:
            return body or None, reusable
        if status == 204:
            return None, reusable
        return FrameRejected(status, _error_message(body, reason), frame[:_HEAD]), reusable

    def _oversized(
        self, status: int, reason: bytes, chunks: list[bytes], size: int, frame: bytes
    ) -> _Outcome:
        if status == 200:  # the head names the call this answer was for
            return FrameTooLarge(size, self._max_body, b"".join(chunks)[:_HEAD])
        return FrameRejected(status, reason.decode("latin-1") or "error", frame[:_HEAD])


def _content_length(headers: Sequence[tuple[bytes, bytes]]) -> int:
    for name, value in headers:
        if name == b"content-length":
            return int(value)  # h11 has checked it is a number
    return -1


def _error_message(body: bytes, reason: bytes) -> str:
    """The server's own words if it sent our JSON error body, else the status line."""
    try:
        payload = json.loads(body)
        error = payload["error"] if "error" in payload else payload["payload"]["error"]
        message = error["message"]
        if isinstance(message, str):
            return message
    except (ValueError, KeyError, TypeError):
        pass
    return reason.decode("latin-1") or "error"


def _why(exc: BaseException) -> str:
    """An exception in words, with the cause anyio wraps its socket errors around."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    if cause is not None:
        text += f" ({_why(cause)})"
    return text


class HttpClientStream:
    """Frames over HTTP POSTs. Opened by :func:`open_http_client`."""

    def __init__(self, pool: _Pool, tasks: anyio.abc.TaskGroup, *, max_frame_size: int) -> None:
        self._pool = pool
        self._tasks = tasks
        self._max = max_frame_size
        self._info = TransportInfo("http", pool.origin.url)
        self._send_replies, self._replies = anyio.create_memory_object_stream[
            bytes | TransportError
        ](math.inf)
        self._closed: TransportClosed | None = None

    @property
    def info(self) -> TransportInfo:
        return self._info

    @property
    def max_frame_size(self) -> int:
        return self._max

    async def send(self, frame: bytes) -> None:
        self.send_nowait((frame,))

    async def send_many(self, frames: Sequence[bytes]) -> None:
        self.send_nowait(frames)

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Start one POST per frame; never waits (each POST waits in its own task)."""
        if self._closed is not None:
            raise self._closed
        start = self._tasks.start_soon
        for frame in frames:
            start(self._post, frame)
        return True

    async def receive(self) -> bytes:
        if self._closed is not None and not self._replies.statistics().current_buffer_used:
            raise self._closed
        try:
            item = await self._replies.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise self._closed or TransportClosed("closed") from None
        if isinstance(item, TransportError):
            raise item
        return item

    async def aclose(self) -> None:
        if self._closed is None:
            self._closed = TransportClosed("closed")
        self._tasks.cancel_scope.cancel()  # every POST still waiting, too
        self._send_replies.close()
        self._replies.close()

    async def _post(self, frame: bytes) -> None:
        try:
            outcome = await self._pool.post(frame)
        except TransportClosed as exc:
            if self._closed is not None:
                return  # already ended (and said why)
            self._closed = outcome = exc
        if outcome is not None:
            # Closed while the reply was in flight: nobody is listening any more.
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._send_replies.send_nowait(outcome)


@asynccontextmanager
async def open_http_client(
    endpoint: str,
    *,
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> AsyncIterator[HttpClientStream]:
    """A frame stream to an agent's HTTP endpoint (``POST {endpoint}/rpc``).

    ``ssl_context`` verifies an ``https://`` endpoint (default: the system's CAs).
    """
    if max_connections < 1:
        raise ValueError(f"max_connections must be at least 1, not {max_connections}")
    pool = _Pool(
        _origin(endpoint, token, ssl_context),
        max_connections=max_connections,
        max_body=max_frame_size,
    )
    try:
        with unwrap_single_error():
            async with anyio.create_task_group() as tg:
                stream = HttpClientStream(pool, tg, max_frame_size=max_frame_size)
                try:
                    yield stream
                finally:
                    await stream.aclose()
    finally:
        with anyio.CancelScope(shield=True):
            await pool.aclose()
