"""Byte I/O for a connection whose frames are ours to write: no wait when the socket has room.

anyio's ``SocketStream`` waits on every ``send`` (a checkpoint at least: a task
switch per WebSocket message through the link's writer task), and on asyncio
every ``receive`` resumes and pauses the transport's reading (two ``epoll_ctl``
calls and their bookkeeping: ~20 % of a loopback WebSocket round trip). So a
stream that frames its own bytes (:class:`~transports.WebSocketStream`) does its
I/O through a :class:`SocketIO`:

- on asyncio, an ``asyncio.Protocol`` of ours takes over the connection's
  transport, as websockets' own asyncio implementation is built: reading stays
  on (paused only past a high-water mark), writes go straight to the transport;
- on trio, writes go straight to the socket, and a read waits for the socket
  to be readable, then reads it (not ``recv`` first: a link read when it is
  idle would try, fail with EAGAIN, then wait; a crowd of 1,000 links pays
  that and anyio's and trio's wrappers on every message it is sent);
- anything else (TLS) keeps anyio's stream: every write waits, as before.

On trio a socket is read only when someone receives, so nobody learns that the peer
left while nobody reads; a :class:`ReadAheadIO` reads it all along from a task of
its own, as asyncio's transport does, for the HTTP server to watch its clients.

Each probes what it reaches under anyio (a private transport on asyncio) and
falls back to the plain stream when it is not there. A plain TCP stream that
falls back means anyio changed under us (``anyio<5`` is pinned for this): it still
works, only slower, and a warning says so once per process
(``transports.socket_fast_path_unavailable``). ``tests/unit/test_sockets.py``
asserts the fast path is taken on both backends.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import functools
import ipaddress
import os
import socket
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final, Protocol, TypeVar, cast

import anyio
import anyio.abc
import sniffio

from transports._logging import get_logger

__all__ = [
    "READ_SIZE",
    "ReadAheadIO",
    "SocketIO",
    "adopts_io",
    "connect_tcp",
    "lazy_stream_protocol",
    "offered_io",
    "raw_socket",
    "read_ahead_io",
    "shrink_reads",
    "socket_io",
]

#: trio's (and anyio's) read size. asyncio's socket transport reads 256 KiB at a time,
#: which glibc maps and unmaps on every read: a buffer that large is mmap'd for each
#: recv and unmapped after, and that cost showed in every loopback profile.
READ_SIZE: Final = 64 * 1024
#: Bytes read but not yet received past which asyncio stops reading the socket
#: (the kernel's buffers and TCP then hold the sender back), and below which it resumes.
_HIGH_WATER: Final = 4 * READ_SIZE
_LOW_WATER: Final = READ_SIZE

log = get_logger("transports.sockets")
_warned: set[str] = set()  # the backends whose fallback was logged (once per process)


class SocketIO(Protocol):
    """Ordered byte I/O. ``write`` never waits; ``drain`` waits until all is written.

    Errors are the ones anyio raises (``BrokenResourceError``, ``ClosedResourceError``)
    or ``OSError``; ``receive`` returns ``b""`` at the end of the stream.
    """

    async def receive(self) -> bytes: ...

    def write(self, data: bytes) -> bool:
        """Write ``data`` after everything written before; False if some of it waits."""
        ...

    async def drain(self) -> None:
        """Until everything written has left (one task drains at a time)."""
        ...

    async def aclose(self) -> None: ...

    #: Whether :meth:`watch_hang_up` can watch (asyncio's transport calls back); where it
    #: cannot, only a task reading the connection learns that the peer left.
    watches_hang_up: bool

    def watch_hang_up(self, callback: Callable[[], object] | None) -> bool:
        """Call ``callback`` (once) if the peer ends the connection before it sends another
        byte, at once if it has already; None stops watching. False, and no watch, if a
        byte already waits to be received, or if this I/O cannot watch."""
        ...

    def release(self) -> None:
        """Give the stream back as anyio had it, with what was read and not received:
        the stream's own ``receive`` and ``send`` work again (this I/O must not be used)."""
        ...


async def connect_tcp(host: str, port: int) -> anyio.abc.SocketStream:
    """``anyio.connect_tcp`` without its happy eyeballs where there is nothing to race.

    For one IP address anyio still opens a task group, starts a task, waits on an
    event under a timeout scope and cancels the group once connected: a third of
    what dialling a loopback link cost the client. An address is connected by the
    backend's own connect (what anyio's attempt task calls); a name still goes
    through anyio, which resolves it and races its addresses. On asyncio the stream's
    reading is left on: the caller takes its I/O over at once (:func:`socket_io`).
    """
    address = _ip_address(host)
    if address is None:
        return await anyio.connect_tcp(host, port)
    backend = _backend()
    if backend is None:
        return await anyio.connect_tcp(host, port)
    if sniffio.current_async_library() == "asyncio":
        connected = await _asyncio_connect(*address, port)
        if connected is not None:
            return connected
    stream: anyio.abc.SocketStream = await backend.connect_tcp(address[1], port)
    return stream


@functools.lru_cache(maxsize=64)
def _ip_address(host: str) -> tuple[socket.AddressFamily, str] | None:
    """``host``'s address family and canonical form if it is an IP address, else None
    (a dialler names the same few hosts again and again: each parsed once)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    return family, address.compressed


async def _asyncio_connect(
    family: socket.AddressFamily, host: str, port: int
) -> anyio.abc.SocketStream | None:
    """anyio's connect on asyncio, its transport's reading left on: anyio pauses it until
    a ``receive``, and :func:`socket_io`, which the dialler calls at once, resumes it (a
    selector registration removed and made again per link). None: anyio changed.

    The address is connected here, not by ``create_connection(host, port)``, which
    would resolve it again (asyncio's check that a host is already an address is
    a parse by :mod:`ipaddress` per dial)."""
    try:
        from anyio._backends._asyncio import SocketStream, StreamProtocol
    except ImportError:  # pragma: no cover - anyio<5 is pinned; anyio's connect then
        return None
    loop = asyncio.get_running_loop()
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await _connect_nonblocking(loop, sock, (host, port))
        protocol_type = lazy_stream_protocol(StreamProtocol)
        transport, protocol = await loop.create_connection(protocol_type, sock=sock)
    except BaseException:
        sock.close()
        raise
    stream: anyio.abc.SocketStream = SocketStream(transport, protocol)
    return stream


async def _connect_nonblocking(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, address: tuple[str, int]
) -> None:
    """``loop.sock_connect`` for an address that needs no resolving: connect, and if
    that is under way, wait until the socket is writable and read how it ended."""
    error = sock.connect_ex(address)
    if error in (errno.EINPROGRESS, errno.EAGAIN):
        done: asyncio.Future[None] = loop.create_future()
        fd = sock.fileno()
        loop.add_writer(fd, _set_once, done)
        try:
            await done
        finally:
            loop.remove_writer(fd)
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error:
        raise OSError(error, f"Connect call failed {address}: {os.strerror(error)}")


def _set_once(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


class _LazyState(asyncio.Protocol):
    """anyio's asyncio ``StreamProtocol`` state, made when first used.

    anyio's protocol makes a read queue and two ``asyncio.Event``s (each with a deque
    of waiters) as the connection is made: 2.5 KiB and nine objects for the cyclic
    collector to scan, per connection. A link's I/O is taken over at once
    (:class:`_AsyncioIO`) and they are never used; an idle link kept them for its
    whole life. Here each is made on first use, as anyio makes it (the queue and the
    read event empty, the write event set), so anyio's stream, when it is given back
    (:meth:`SocketIO.release`) or was never taken, works as before.
    """

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # All that anyio's does besides making the three (tests/unit/test_sockets.py
        # holds anyio's to that).
        transport.set_write_buffer_limits(0)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        # Called only for what the instance does not hold yet.
        value: Any
        if name == "read_queue":
            value = collections.deque()
        elif name == "read_event":
            value = asyncio.Event()
        elif name == "write_event":
            value = asyncio.Event()
            value.set()
        else:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        setattr(self, name, value)
        return value


_Protocol = TypeVar("_Protocol", bound=asyncio.Protocol)


def lazy_stream_protocol(base: type[_Protocol]) -> type[_Protocol]:
    """``base`` (anyio's asyncio ``StreamProtocol``) with its state made on first use."""
    lazy = _lazy_types.get(base)
    if lazy is None:
        name = f"Lazy{base.__name__}"
        lazy = _lazy_types[base] = type(name, (_LazyState, base), {"__module__": __name__})
    return cast("type[_Protocol]", lazy)


_lazy_types: dict[type, type] = {}


def _backend() -> Any:
    """anyio's backend class for the running loop (private, so probed), or None."""
    try:
        from anyio._core._eventloop import get_async_backend
    except ImportError:  # pragma: no cover - anyio<5 is pinned; plain connect_tcp then
        return None
    return get_async_backend()


#: The I/O an HTTP connection read an upgrade request with, while the upgrade handler
#: that adopts it runs (see :func:`adopts_io`): it takes it over as it is, instead of
#: the connection giving the transport back to anyio and the handler taking it again.
offered_io: ContextVar[SocketIO | None] = ContextVar("offered_io", default=None)

_Adopting = TypeVar("_Adopting", bound=Callable[..., Any])


def adopts_io(handler: _Adopting) -> _Adopting:
    """Mark an upgrade handler that takes the connection's I/O from :data:`offered_io`
    rather than reading the raw stream (a handler that reads the stream must not be)."""
    setattr(handler, "adopts_io", True)  # noqa: B010 - an attribute mypy cannot see
    return handler


def socket_io(stream: anyio.abc.ByteStream) -> SocketIO:
    """The fastest I/O ``stream`` allows (see the module docstring)."""
    found = _asyncio_transport(stream)
    if found is not None and _AsyncioIO.can_take_over(found[1]):
        return _AsyncioIO(stream, *found)
    if isinstance(stream, anyio.abc.SocketStream):
        sock = raw_socket(stream)
        backend = sniffio.current_async_library()
        if backend != "trio" or not isinstance(sock, socket.socket):
            _fell_back(backend, stream)  # on asyncio the transport above was the fast path
        if isinstance(sock, socket.socket):  # trio hands out the socket itself
            return _QueuedIO(stream, sock)
    return _QueuedIO(stream, None)


def raw_socket(stream: anyio.abc.SocketStream) -> socket.socket | None:
    """The socket under anyio's ``stream``, read from the stream itself: its
    ``extra(raw_socket)`` builds anyio's table of every attribute first, asking the
    kernel for the peer's address and the socket for its family on each lookup."""
    sock: socket.socket | None = getattr(stream, "_raw_socket", None)  # what the table gives
    if sock is None:
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    return sock


def _fell_back(backend: str, stream: anyio.abc.SocketStream) -> None:
    """A plain socket stream without its fast path: anyio's internals changed. Say it once."""
    if backend in _warned:
        return
    _warned.add(backend)
    log.warning(
        "transports.socket_fast_path_unavailable",
        backend=backend,
        stream=type(stream).__qualname__,
        anyio=_anyio_version(),
        detail="every WebSocket write now waits on anyio (slower, still correct)",
    )


def _anyio_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("anyio")
    except PackageNotFoundError:  # pragma: no cover - anyio is installed: we import it
        return "unknown"


def _asyncio_transport(stream: anyio.abc.ByteStream) -> tuple[asyncio.Transport, Any] | None:
    """anyio-on-asyncio's transport and protocol under ``stream`` (private, so probed)."""
    if not isinstance(stream, anyio.abc.SocketStream):
        return None
    transport = getattr(stream, "_transport", None)
    protocol = getattr(stream, "_protocol", None)
    if not isinstance(transport, asyncio.Transport):
        return None
    # Asking a lazy protocol for its event would make it.
    if isinstance(protocol, _LazyState) or hasattr(protocol, "write_event"):
        return transport, protocol
    return None


def shrink_reads(stream: anyio.abc.ByteStream) -> None:
    """Make asyncio read ``stream``'s socket ``READ_SIZE`` bytes at a time, as trio does.

    Measured on a loopback WebSocket round trip (``python -m bench.profile
    --transport websocket``, asyncio, without the bench's MALLOC_* settings):
    ~60 us of every 256 KiB ``recv`` went to mapping its buffer.
    """
    found = _asyncio_transport(stream)
    if found is not None and hasattr(found[0], "max_size"):
        found[0].max_size = READ_SIZE


class _QueuedIO:
    """trio's socket written directly, or (``sock`` None: TLS) every write queued.

    What the socket does not take waits in ``_pending``, and everything written
    later queues behind it, so bytes leave in order; ``drain`` sends the queue
    through anyio.
    """

    __slots__ = (
        "_closed_while_waiting",
        "_draining",
        "_pending",
        "_sock",
        "_stream",
        "_wait_readable",
    )

    def __init__(self, stream: anyio.abc.ByteStream, sock: socket.socket | None) -> None:
        self._stream = stream
        self._sock = sock
        self._pending = bytearray()
        self._draining = False
        self._wait_readable: Any = None
        self._closed_while_waiting: type[BaseException] = anyio.ClosedResourceError
        if sock is not None:
            import trio  # only ever given a socket on trio

            self._wait_readable = trio.lowlevel.wait_readable
            self._closed_while_waiting = trio.ClosedResourceError

    async def receive(self) -> bytes:
        sock = self._sock
        if sock is None:
            try:
                return await self._stream.receive(READ_SIZE)
            except anyio.EndOfStream:
                return b""
        try:
            while True:
                await self._wait_readable(sock)  # a checkpoint, as every receive must be
                try:
                    return sock.recv(READ_SIZE)
                except BlockingIOError:  # woken, and someone else read first
                    continue
        except self._closed_while_waiting:  # closed while we waited
            raise anyio.ClosedResourceError from None

    def write(self, data: bytes) -> bool:
        if self._sock is None or self._pending or self._draining:
            self._pending += data
            return False
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            self._pending += data[sent:]
            return False
        return True

    async def drain(self) -> None:
        while self._pending:
            data = bytes(self._pending)
            self._pending.clear()
            self._draining = True
            try:
                await self._stream.send(data)
            finally:
                self._draining = False

    async def aclose(self) -> None:
        await anyio.aclose_forcefully(self._stream)

    watches_hang_up = False

    def watch_hang_up(self, callback: Callable[[], object] | None) -> bool:
        return False  # a socket read by a task: only a read finds the peer gone

    def release(self) -> None:
        pass  # nothing taken: the socket (or anyio's stream) was read directly


class _AsyncioIO(asyncio.Protocol):
    """The connection's asyncio protocol from now on: reads queue here, writes go out at once."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_drainer",
        "_eof",
        "_error",
        "_loop",
        "_lost",
        "_on_hang_up",
        "_previous",
        "_read_paused",
        "_reader",
        "_stream",
        "_transport",
        "_write_paused",
    )

    @staticmethod
    def can_take_over(protocol: Any) -> bool:
        if isinstance(protocol, _LazyState):  # its state is made on first use
            return True
        return all(hasattr(protocol, name) for name in ("read_queue", "is_at_eof", "exception"))

    def __init__(
        self, stream: anyio.abc.ByteStream, transport: asyncio.Transport, previous: Any
    ) -> None:
        self._stream = stream
        self._transport = transport
        self._previous = previous
        self._loop = asyncio.get_running_loop()
        # Read from the instance: a lazy protocol's state not made yet is its initial one
        # (nothing queued, writing on), and asking for it would make it.
        state = vars(previous)
        queued = state.get("read_queue")
        # What anyio's protocol read but nobody received yet comes first.
        self._chunks: list[bytes] = list(queued) if queued else []
        if queued:
            queued.clear()
        self._buffered = sum(map(len, self._chunks))
        self._eof: bool = previous.is_at_eof
        self._error: BaseException | None = previous.exception
        self._reader: asyncio.Future[None] | None = None
        self._drainer: asyncio.Future[None] | None = None
        write_event = state.get("write_event")
        self._write_paused = write_event is not None and not write_event.is_set()
        self._read_paused = False
        self._lost = transport.is_closing()
        self._on_hang_up: Callable[[], object] | None = None
        if hasattr(transport, "max_size"):
            transport.max_size = READ_SIZE  # see shrink_reads
        transport.set_protocol(self)
        transport.resume_reading()  # anyio pauses it between receives; we read all along

    # -- asyncio.Protocol ----------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._on_hang_up = None  # the peer is plainly still there
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _HIGH_WATER and not self._read_paused:
            self._read_paused = True
            self._transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake_reader()
        self._hung_up()
        return True  # keep the transport open: our half of a close may still go out

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._eof = True
        self._error = exc
        self._wake_reader()
        self._wake_drainer()
        self._hung_up()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drainer()

    # -- SocketIO ---------------------------------------------------------------------------

    async def receive(self) -> bytes:
        chunks = self._chunks
        while not chunks:
            if self._error is not None:
                raise anyio.BrokenResourceError from self._error
            if self._eof:
                return b""
            self._reader = self._loop.create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        chunk = chunks.pop(0)
        self._buffered -= len(chunk)
        if self._read_paused and self._buffered <= _LOW_WATER:
            self._read_paused = False
            self._transport.resume_reading()
        return chunk

    def write(self, data: bytes) -> bool:
        if self._lost or self._transport.is_closing():
            raise anyio.BrokenResourceError("the connection is closed")
        self._transport.write(data)  # in order after anything it still buffers
        # anyio set the transport's high-water mark to 0: anything left over pauses it.
        return not self._write_paused

    async def drain(self) -> None:
        while self._write_paused:
            if self._lost:
                raise anyio.BrokenResourceError("the connection is closed")
            self._drainer = self._loop.create_future()
            try:
                await self._drainer
            finally:
                self._drainer = None

    async def aclose(self) -> None:
        await anyio.aclose_forcefully(self._stream)

    watches_hang_up = True

    def watch_hang_up(self, callback: Callable[[], object] | None) -> bool:
        """What a task reading the connection would learn, with no task: an HTTP server
        watches so for a client that leaves while its request is answered."""
        if callback is not None and self._chunks:
            return False
        self._on_hang_up = callback
        if self._eof:
            self._hung_up()
        return True

    def release(self) -> None:
        previous = self._previous
        previous.read_queue.extend(self._chunks)
        self._chunks.clear()
        # Set only when so: each is a class default there, and an idle link keeps the protocol.
        if self._eof:
            previous.is_at_eof = True
        if isinstance(self._error, Exception):
            previous.exception = self._error
        if previous.read_queue or self._eof:
            previous.read_event.set()
        if self._write_paused:
            previous.write_event.clear()
        self._on_hang_up = None
        self._transport.set_protocol(previous)
        if not self._lost:
            self._transport.pause_reading()  # anyio reads only while a receive waits

    def _hung_up(self) -> None:
        callback, self._on_hang_up = self._on_hang_up, None
        if callback is not None and not self._chunks:
            callback()

    def _wake_reader(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    def _wake_drainer(self) -> None:
        if self._drainer is not None and not self._drainer.done():
            self._drainer.set_result(None)


class ReadAheadIO:
    """trio's socket read all along by a task of its own, as asyncio's transport reads.

    The HTTP server must learn that a client left while its request is handled, and on
    trio only a read learns it: a task per request reading while the handler ran (a
    spawn, a nursery, an epoll registration made and dropped, three scheduler passes).
    This I/O's reading task (:meth:`read_all_along`, started once per connection in the
    connection's nursery) reads whatever comes, up to ``_HIGH_WATER`` not yet received,
    so :meth:`watch_hang_up` works as asyncio's: the handler runs in the connection's
    own task and the reading task cancels it. Writes go to ``inner``'s socket as before.
    When the reading task is stopped, :meth:`unread` gives back what it read and nobody
    received (an upgrade's first bytes).
    """

    __slots__ = (
        "_buffered",
        "_chunks",
        "_eof",
        "_error",
        "_on_hang_up",
        "_paused",
        "_reader",
        "_wakeup",
        "inner",
    )

    watches_hang_up = True

    def __init__(self, inner: _QueuedIO, wakeup: Callable[[], Any]) -> None:
        assert inner._sock is not None, "a plain socket on trio"
        self.inner = inner
        self._wakeup = wakeup  # the loop's one-shot wake-up (transports._loop)
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._eof = False
        self._error: BaseException | None = None
        self._reader: Any = None  # the receive that waits for a chunk
        self._paused: Any = None  # the reading task, waiting for room under _HIGH_WATER
        self._on_hang_up: Callable[[], object] | None = None

    async def read_all_along(self) -> None:
        """The reading task: until the end of the stream, or cancelled."""
        import trio

        sock = self.inner._sock
        assert sock is not None
        wait_readable = trio.lowlevel.wait_readable
        while True:
            if self._buffered > _HIGH_WATER:  # nobody receives: TCP holds the sender back
                self._paused = self._wakeup()
                await self._paused.wait()
                continue
            try:
                await wait_readable(sock)
                data = sock.recv(READ_SIZE)
            except BlockingIOError:
                continue
            except (OSError, trio.ClosedResourceError) as exc:
                self._error = exc
                data = b""
            if not data:
                self._eof = True
                self._wake_reader()
                self._hung_up()
                return
            self._on_hang_up = None  # the peer is plainly still there
            self._chunks.append(data)
            self._buffered += len(data)
            self._wake_reader()

    async def receive(self) -> bytes:
        chunks = self._chunks
        while not chunks:
            if self._error is not None:
                raise anyio.BrokenResourceError from self._error
            if self._eof:
                return b""
            self._reader = parked = self._wakeup()
            try:
                await parked.wait()
            finally:
                self._reader = None
        chunk = chunks.pop(0)
        self._buffered -= len(chunk)
        if self._paused is not None and self._buffered <= _LOW_WATER:
            self._paused.set()
            self._paused = None
        return chunk

    def write(self, data: bytes) -> bool:
        return self.inner.write(data)

    async def drain(self) -> None:
        await self.inner.drain()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def watch_hang_up(self, callback: Callable[[], object] | None) -> bool:
        """As asyncio's: ``callback`` once if the peer ends the stream before another
        byte comes (at once if it has); False, and no watch, if a chunk waits."""
        if callback is not None and self._chunks:
            return False
        self._on_hang_up = callback
        if self._eof:
            self._hung_up()
        return True

    def release(self) -> None:
        self._on_hang_up = None  # the socket was read directly: see unread()

    def unread(self) -> bytes:
        """What the reading task read and nobody received (call once it is stopped)."""
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        return data

    def _hung_up(self) -> None:
        callback, self._on_hang_up = self._on_hang_up, None
        if callback is not None and not self._chunks:
            callback()

    def _wake_reader(self) -> None:
        if self._reader is not None:
            self._reader.set()


def read_ahead_io(io: SocketIO, wakeup: Callable[[], Any]) -> ReadAheadIO | None:
    """``io`` read all along (:class:`ReadAheadIO`) where it is trio's plain socket, which
    cannot watch for a hang-up otherwise; None where it can (asyncio) or cannot (TLS)."""
    if isinstance(io, _QueuedIO) and io._sock is not None:
        return ReadAheadIO(io, wakeup)
    return None
