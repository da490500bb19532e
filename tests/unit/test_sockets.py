"""The socket fast path is taken on both backends, and a fallback says so once.

``transports/_sockets.py`` reaches under anyio (a private transport on asyncio, the
raw socket on trio); were anyio to change, the WebSocket would still work, only
slower, so nothing else would notice. This does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest
import sniffio
from structlog.testing import capture_logs

from transports import _sockets
from transports._sockets import READ_SIZE, shrink_reads, socket_io

pytestmark = pytest.mark.anyio

GUARD = 10.0


@asynccontextmanager
async def tcp_pair() -> AsyncIterator[tuple[anyio.abc.SocketStream, anyio.abc.SocketStream]]:
    """Both ends of a loopback TCP connection, as anyio hands them out."""
    accepted: list[anyio.abc.SocketStream] = []
    arrived = anyio.Event()

    async def accept(stream: anyio.abc.SocketStream) -> None:
        async with stream:  # closed when the pair is done with
            accepted.append(stream)
            arrived.set()
            await anyio.sleep_forever()

    with anyio.fail_after(GUARD):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, accept)
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            async with await anyio.connect_tcp("127.0.0.1", port) as client:
                await arrived.wait()
                yield client, accepted[0]
                tg.cancel_scope.cancel()


async def test_the_fast_path_is_taken_and_carries_bytes_both_ways() -> None:
    async with tcp_pair() as (client, server):
        with capture_logs() as logs:
            io = socket_io(client)
        if sniffio.current_async_library() == "asyncio":
            assert isinstance(io, _sockets._AsyncioIO)  # our protocol owns the transport
        else:
            assert isinstance(io, _sockets._QueuedIO) and io._sock is not None  # trio's socket
        assert not [line for line in logs if "fast_path" in line["event"]]
        assert io.write(b"ping")  # the socket had room: written at once, no wait
        with anyio.fail_after(GUARD):
            assert await server.receive() == b"ping"
            await server.send(b"pong")
            assert await io.receive() == b"pong"


async def test_asyncio_reads_are_shrunk_to_trios_size() -> None:
    async with tcp_pair() as (client, _):
        shrink_reads(client)
        if sniffio.current_async_library() == "asyncio":
            transport = client._transport  # type: ignore[attr-defined]
            assert transport.max_size == READ_SIZE


async def test_a_fallback_is_logged_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if anyio had changed: no private transport, no raw socket.
    monkeypatch.setattr(_sockets, "_asyncio_transport", lambda stream: None)
    monkeypatch.setattr(_sockets, "_warned", set())
    async with tcp_pair() as (client, server):
        monkeypatch.setattr(client, "extra", lambda attribute, default=None: default)
        monkeypatch.setattr(type(client), "_raw_socket", property(lambda self: None))
        with capture_logs() as logs:
            first, second = socket_io(client), socket_io(client)
        assert isinstance(first, _sockets._QueuedIO) and first._sock is None
        assert isinstance(second, _sockets._QueuedIO)
        [line] = [
            line for line in logs if line["event"] == "transports.socket_fast_path_unavailable"
        ]
        assert line["log_level"] == "warning"
        assert line["backend"] == sniffio.current_async_library() and line["anyio"].startswith("4.")
        assert not first.write(b"queued")  # every write now waits on anyio ...
        with anyio.fail_after(GUARD):
            await first.drain()
            assert await server.receive() == b"queued"  # ... and still arrives


async def test_a_released_stream_reads_what_the_io_read_and_writes_again() -> None:
    """An HTTP connection upgraded to WebSocket hands its stream over as anyio made it:
    the bytes its I/O read and nobody received come first from the stream's own
    ``receive``, and its ``send`` works (on asyncio the transport has anyio's protocol back)."""
    async with tcp_pair() as (client, server):
        io = socket_io(server)
        with anyio.fail_after(GUARD):
            if isinstance(io, _sockets._AsyncioIO):
                io.data_received(b"read, not received")  # as the transport hands it over
            else:
                await client.send(b"read, not received")  # trio: still in the socket
            io.release()
            assert await server.receive() == b"read, not received"
            await client.send(b"and more")
            assert await server.receive() == b"and more"
            await server.send(b"answer")
            assert await client.receive() == b"answer"


async def test_a_hang_up_is_told_without_a_reader() -> None:
    """asyncio's transport tells the I/O the peer left, so no task need read to learn it;
    bytes that come first end the watch (the peer is there), and trio's socket cannot
    watch unless a task reads it all along (below)."""
    async with tcp_pair() as (client, server):
        io = socket_io(server)
        told = anyio.Event()
        if sniffio.current_async_library() == "trio":
            assert not io.watches_hang_up and not io.watch_hang_up(told.set)
            return
        assert io.watches_hang_up and io.watch_hang_up(told.set)
        await client.send_eof()
        with anyio.fail_after(GUARD):
            await told.wait()
        assert io.watch_hang_up(told.set)  # the end came already: told at once


async def test_bytes_before_the_hang_up_end_the_watch() -> None:
    async with tcp_pair() as (client, server):
        io = socket_io(server)
        if not io.watches_hang_up:
            return  # trio: a reader learns it (tests/integration/test_http_server.py)
        told: list[str] = []
        assert io.watch_hang_up(lambda: told.append("gone"))
        await client.send(b"a pipelined request")
        await client.send_eof()
        with anyio.fail_after(GUARD):
            assert await io.receive() == b"a pipelined request"
            assert await io.receive() == b""
        assert told == []


@asynccontextmanager
async def read_ahead(server: anyio.abc.SocketStream) -> AsyncIterator[_sockets.ReadAheadIO]:
    """trio's I/O of ``server`` read all along by a task, as the HTTP server reads it."""
    from transports._loop import current_loop

    io = _sockets.read_ahead_io(socket_io(server), current_loop().wakeup)
    assert io is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(io.read_all_along)
        yield io
        tg.cancel_scope.cancel()


async def test_trios_socket_read_all_along_tells_a_hang_up_as_asyncios_transport_does() -> None:
    """On trio only a read learns that the peer left: a task reading all along tells the
    watch, so a handler need not be run beside a read of its own. asyncio's transport
    tells it already (nothing to read ahead there)."""
    from transports._loop import current_loop

    async with tcp_pair() as (client, server):
        if sniffio.current_async_library() == "asyncio":
            assert _sockets.read_ahead_io(socket_io(server), current_loop().wakeup) is None
            return
        async with read_ahead(server) as io:
            told = anyio.Event()
            assert io.watches_hang_up and io.watch_hang_up(told.set)
            await client.send(b"a request")
            with anyio.fail_after(GUARD):
                assert await io.receive() == b"a request"
            assert not told.is_set()  # bytes: the peer is there, and the watch is over
            assert io.watch_hang_up(told.set)
            await client.send_eof()
            with anyio.fail_after(GUARD):
                await told.wait()
                assert await io.receive() == b""
            assert io.watch_hang_up(told.set)  # the end came already: told at once


async def test_read_ahead_bytes_keep_their_order_and_what_nobody_received_is_given_back() -> None:
    """More than the read-ahead holds arrives whole and in order (the task waits for room
    rather than reading without bound), and once the task stops, what it read and nobody
    received is given back: an upgrade's first bytes."""
    if sniffio.current_async_library() == "asyncio":
        return  # asyncio's transport reads (test_bytes_before_the_hang_up_end_the_watch)
    sent = bytes(range(256)) * (4 * 1024 * 4)  # 4 MiB: many times the high-water mark
    async with tcp_pair() as (client, server), anyio.create_task_group() as tg:
        tg.start_soon(client.send, sent)
        got = bytearray()
        async with read_ahead(server) as io:
            with anyio.fail_after(GUARD):
                while len(got) < len(sent) - READ_SIZE:
                    got += await io.receive()
        got += io.unread()
        with anyio.fail_after(GUARD):
            while len(got) < len(sent):
                got += await server.receive()
    assert got == sent


async def test_an_address_is_dialled_without_anyios_race_and_a_name_through_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One address has nothing to race: no task group, task and event per dial."""
    raced: list[str] = []
    real_connect = anyio.connect_tcp

    async def racing(host: str, port: int) -> anyio.abc.SocketStream:
        raced.append(host)
        return await real_connect(host, port)

    monkeypatch.setattr(anyio, "connect_tcp", racing)
    with anyio.fail_after(GUARD):
        async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as tcp:
            port = tcp.extra(anyio.abc.SocketAttribute.local_port)
            async with await _sockets.connect_tcp("127.0.0.1", port) as stream:
                assert stream.extra(anyio.abc.SocketAttribute.remote_port) == port
            assert raced == []
            async with await _sockets.connect_tcp("localhost", port):
                pass
    assert raced == ["localhost"]


async def test_a_dialled_connection_is_read_from_the_start_with_nothing_paused_and_resumed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dialler takes the connection's I/O over at once: on asyncio its transport's
    reading is never paused for anyio's stream to resume it (a selector registration
    removed and made again per link); the bytes still arrive, on both backends."""
    paused: list[object] = []
    if sniffio.current_async_library() == "asyncio":
        from asyncio import selector_events

        transport_type: Any = getattr(selector_events, "_SelectorSocketTransport")  # noqa: B009
        pause = transport_type.pause_reading

        def counted(self: Any) -> None:
            paused.append(self)
            pause(self)

        monkeypatch.setattr(transport_type, "pause_reading", counted)
    with anyio.fail_after(GUARD):
        async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as tcp:
            port = tcp.extra(anyio.abc.SocketAttribute.local_port)
            async with anyio.create_task_group() as tg:

                async def greet(stream: anyio.abc.SocketStream) -> None:
                    async with stream:
                        await stream.send(b"hello")

                tg.start_soon(tcp.serve, greet)
                async with await _sockets.connect_tcp("127.0.0.1", port) as stream:
                    io = socket_io(stream)
                    assert await io.receive() == b"hello"
                tg.cancel_scope.cancel()
    assert paused == []


_STATE = {"read_queue", "read_event", "write_event"}


class _Limits:
    """A transport that only records its write buffer limits."""

    def __init__(self) -> None:
        self.limits: list[int] = []

    def set_write_buffer_limits(self, high: int) -> None:
        self.limits.append(high)


async def test_anyios_state_is_made_on_first_use_as_anyio_makes_it() -> None:
    """The lazy protocol does what anyio's does as a connection is made, less the three
    things it makes there; were anyio's to do more, this fails."""
    from anyio._backends._asyncio import StreamProtocol

    anyios, transport = StreamProtocol(), _Limits()
    anyios.connection_made(transport)  # type: ignore[arg-type]
    assert set(vars(anyios)) == _STATE and transport.limits == [0]

    lazy_type = _sockets.lazy_stream_protocol(StreamProtocol)
    assert lazy_type is _sockets.lazy_stream_protocol(StreamProtocol)  # one class, made once
    lazy, transport = lazy_type(), _Limits()
    lazy.connection_made(transport)  # type: ignore[arg-type]
    assert vars(lazy) == {} and transport.limits == [0]
    assert isinstance(lazy, StreamProtocol)
    assert len(lazy.read_queue) == 0 and not lazy.read_event.is_set()
    assert lazy.write_event.is_set()
    assert set(vars(lazy)) == _STATE  # made once, then held as anyio's are
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        lazy.nothing  # type: ignore[attr-defined]  # noqa: B018 - the lookup is the test


async def test_a_link_holds_none_of_anyios_stream_state_and_a_released_one_works() -> None:
    """Both ends of a connection made by our accept and our dial, their I/O taken over:
    on asyncio neither protocol made anyio's queue and events (an idle link kept them
    for life); given back, the accepted stream reads and writes through anyio again."""
    from transports._accept import serve_listener

    accepted: list[anyio.abc.SocketStream] = []
    arrived = anyio.Event()

    async def accept(stream: anyio.abc.SocketStream) -> None:
        accepted.append(stream)
        arrived.set()
        await anyio.sleep_forever()

    with anyio.fail_after(GUARD):
        async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as tcp:
            port = tcp.extra(anyio.abc.SocketAttribute.local_port)
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve_listener, tcp, accept, tg)
                async with await _sockets.connect_tcp("127.0.0.1", port) as client:
                    await arrived.wait()
                    server = accepted[0]
                    client_io, server_io = socket_io(client), socket_io(server)
                    if sniffio.current_async_library() == "asyncio":
                        for stream in (client, server):
                            protocol = stream._protocol  # type: ignore[attr-defined]
                            assert _STATE.isdisjoint(vars(protocol))
                    assert client_io.write(b"ping")
                    assert await server_io.receive() == b"ping"
                    server_io.release()
                    await client.send(b"through anyio")
                    assert await server.receive() == b"through anyio"
                    await server.send(b"back")
                    assert await client_io.receive() == b"back"
                    await server.aclose()
                tg.cancel_scope.cancel()


async def test_the_raw_socket_and_the_peers_name_are_read_without_anyios_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """anyio's ``extra`` builds its table of every attribute (a ``getpeername`` each
    time) for one lookup: the socket and the client's name are read without it, the
    same as it gives them, on both backends."""
    from transports._http_server import _peer_name

    async with tcp_pair() as (client, server):
        expected = (
            server.extra(anyio.abc.SocketAttribute.raw_socket),
            f"127.0.0.1:{client.extra(anyio.abc.SocketAttribute.local_port)}",
        )
        looked_up: list[object] = []
        extra = type(server).extra

        def counted(self: Any, attribute: Any, *default: Any) -> Any:
            looked_up.append(attribute)
            return extra(self, attribute, *default)

        monkeypatch.setattr(type(server), "extra", counted)
        assert (_sockets.raw_socket(server), _peer_name(server)) == expected
        assert looked_up == []


async def test_a_client_reset_before_its_name_is_read_is_named_unknown() -> None:
    """On trio the name is asked of the socket when the connection is served: a client
    that reset it first is ``?``, as anyio's table said; asyncio's transport asked when
    it was made, and keeps the name."""
    import socket
    import struct

    from transports._http_server import _peer_name

    async with tcp_pair() as (client, server):
        sock = client.extra(anyio.abc.SocketAttribute.raw_socket)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await client.aclose()  # closed with a reset: the server's socket is not connected
        name = _peer_name(server)
    if sniffio.current_async_library() == "trio":
        assert name == "?"
    else:
        assert name.startswith("127.0.0.1:")


async def test_bytes_read_before_the_takeover_come_first_and_once() -> None:
    """What anyio's protocol read before the I/O took the transport over is received
    first, then what follows; anyio's queue is left empty (it must not give them twice)."""
    async with tcp_pair() as (client, server):
        with anyio.fail_after(GUARD):
            protocol = getattr(server, "_protocol", None)
            if protocol is not None:  # asyncio: as the transport hands bytes to anyio's
                protocol.data_received(b"early")
            else:
                await client.send(b"early")
            io = socket_io(server)
            if protocol is not None:
                assert not protocol.read_queue
            await client.send(b" and late")
            got = b""
            while len(got) < len(b"early and late"):
                got += await io.receive()
    assert got == b"early and late"
