"""The plumbing of ``bench.baselines.mcp_relay``: WebSocket frames, the upgrade, and each
process's hops on asyncio (protocol callbacks) and trio (one task per direction).

Every hop is ``transform(chunk) -> bytes`` from one end to the other; what a process
does is which ends it joins. Frames carry text only (no pings, no fragments: the
floor's own peers send neither).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import os
import re
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import h11
from websockets.speedups import apply_mask

READ_SIZE = 65536
Transform = Callable[[bytes], bytes]
Announce = Callable[[int], None]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_KEY = b"dGhlIHNhbXBsZSBub25jZQ=="
_KEY_LINE = re.compile(rb"(?im)^sec-websocket-key:\s*(\S+)\s*$")


# -- WebSocket, sans I/O -------------------------------------------------------------------


def ws_frame(payload: bytes, *, masked: bool) -> bytes:
    """One final text frame (a client's frames are masked, as RFC 6455 wants)."""
    n = len(payload)
    bit = 0x80 if masked else 0
    if n < 126:
        head = bytes((0x81, bit | n))
    elif n < 65536:
        head = bytes((0x81, bit | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x81, bit | 127)) + n.to_bytes(8, "big")
    if not masked:
        return head + payload
    mask = os.urandom(4)
    return head + mask + apply_mask(payload, mask)


class FrameReader:
    """Frames' payloads out of a byte stream, unmasked."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buffer
        buf += chunk
        out: list[bytes] = []
        while len(buf) >= 2:
            second, pos = buf[1], 2
            n = second & 0x7F
            if n >= 126:
                pos = 4 if n == 126 else 10
                if len(buf) < pos:
                    break
                n = int.from_bytes(buf[2:pos], "big")
            masked = second & 0x80
            end = pos + (4 if masked else 0) + n
            if len(buf) < end:
                break
            if masked:
                out.append(apply_mask(bytes(buf[pos + 4 : end]), bytes(buf[pos : pos + 4])))
            else:
                out.append(bytes(buf[pos:end]))
            del buf[:end]
        return out


def upgrade_request(url: str) -> bytes:
    parts = urlsplit(url)
    return (
        (
            f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        ).encode()
        + b"Sec-WebSocket-Key: "
        + _KEY
        + b"\r\n\r\n"
    )


def upgrade_response(request: bytes) -> bytes:
    found = _KEY_LINE.search(request)
    if found is None:
        raise ValueError("not a WebSocket upgrade")
    accept = base64.b64encode(hashlib.sha1(found.group(1) + _GUID).digest())
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )


class HttpRelay:
    """POSTs in, lines to the agent, its lines back as the answers, in order (h11)."""

    def __init__(self, to_agent: Callable[[bytes], None]) -> None:
        self._to_agent = to_agent
        self._waiting: deque[tuple[h11.Connection, Callable[[bytes], None]]] = deque()
        self._agent_lines = bytearray()

    def received(self, conn: h11.Connection, data: bytes, write: Callable[[bytes], None]) -> None:
        conn.receive_data(data)
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                line = body.rstrip(b"\n") + b"\n"
                self._to_agent(line)
                if b'"id"' in body:
                    self._waiting.append((conn, write))
                else:  # a notification: nobody answers it
                    write(_respond(conn, 202, b""))
                body = b""
            elif isinstance(event, h11.ConnectionClosed):
                return

    def from_agent(self, chunk: bytes) -> None:
        from bench._measure import split_lines

        for line in split_lines(self._agent_lines, chunk):
            if line:
                conn, write = self._waiting.popleft()
                write(_respond(conn, 200, line))


def _respond(conn: h11.Connection, status: int, body: bytes) -> bytes:
    headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
    out = conn.send(h11.Response(status_code=status, headers=headers))
    if body:
        out += conn.send(h11.Data(data=body))
    out += conn.send(h11.EndOfMessage())
    conn.start_next_cycle()
    return out


# -- asyncio: protocol callbacks -----------------------------------------------------------


class _Pump(asyncio.SubprocessProtocol, asyncio.Protocol):
    """Whatever arrives, transformed, written to ``sink``; ``closed`` when the source ends."""

    def __init__(self, transform: Transform, sink: Any = None) -> None:
        self.transform = transform
        self.sink = sink
        self.closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        out = self.transform(data)
        if out:
            self.sink.write(out)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.data_received(data)

    def eof_received(self) -> bool:
        self._close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._close()

    def process_exited(self) -> None:
        self._close()

    def _close(self) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def _stdout_asyncio() -> Any:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout.buffer)
    return transport


async def _stdin_asyncio(transform: Transform, sink: Any) -> _Pump:
    pump = _Pump(transform, sink)
    await asyncio.get_running_loop().connect_read_pipe(lambda: pump, sys.stdin.buffer)
    return pump


async def _spawn_asyncio(command: list[str], transform: Transform) -> tuple[_Pump, Any]:
    loop = asyncio.get_running_loop()
    pump = _Pump(transform)
    transport, _ = await loop.subprocess_exec(
        lambda: pump, *command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None
    )
    return pump, transport.get_pipe_transport(0)


async def _agent_asyncio(transform: Transform) -> None:
    await (await _stdin_asyncio(transform, await _stdout_asyncio())).closed


async def _relay_asyncio(url: str, up: Transform, down: Transform) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(upgrade_request(url))
    await reader.readuntil(b"\r\n\r\n")
    writer.transport.set_protocol(_Pump(down, await _stdout_asyncio()))
    await (await _stdin_asyncio(up, writer.transport)).closed


async def _hub_asyncio(
    command: list[str], up: Transform, down: Transform, announce: Announce
) -> None:
    from_agent, to_agent = await _spawn_asyncio(command, down)
    links: list[asyncio.StreamWriter] = []  # held: the writer must outlive its handler

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        links.append(writer)
        request = await reader.readuntil(b"\r\n\r\n")
        writer.transport.set_protocol(_Pump(up, to_agent))
        from_agent.sink = writer.transport
        writer.write(upgrade_response(request))

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    announce(server.sockets[0].getsockname()[1])
    await from_agent.closed


class _HttpConnection(asyncio.Protocol):
    def __init__(self, relay: HttpRelay) -> None:
        self._relay = relay
        self._conn = h11.Connection(h11.SERVER)
        self._write: Callable[[bytes], None] = lambda data: None

    def connection_made(self, transport: Any) -> None:
        self._write = transport.write

    def data_received(self, data: bytes) -> None:
        self._relay.received(self._conn, data, self._write)


async def _http_asyncio(command: list[str], announce: Announce) -> None:
    loop = asyncio.get_running_loop()
    from_agent, to_agent = await _spawn_asyncio(command, lambda chunk: b"")
    relay = HttpRelay(to_agent.write)

    def answer(chunk: bytes) -> bytes:
        relay.from_agent(chunk)
        return b""

    from_agent.transform = answer
    server = await loop.create_server(lambda: _HttpConnection(relay), "127.0.0.1", 0)
    announce(server.sockets[0].getsockname()[1])
    await from_agent.closed


# -- trio: a task per direction ------------------------------------------------------------


async def _pump_trio(source: Any, sink: Any, transform: Transform) -> None:
    while data := await source.receive_some(READ_SIZE):
        out = transform(data)
        if out:
            await sink.send_all(out)


async def _until(stream: Any, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = await stream.receive_some(READ_SIZE)
        if not chunk:
            raise ConnectionError("closed during the upgrade")
        data += chunk
    return data


def _stdio_trio() -> tuple[Any, Any]:
    import trio

    return trio.lowlevel.FdStream(os.dup(0)), trio.lowlevel.FdStream(os.dup(1))


async def _agent_trio(transform: Transform) -> None:
    stdin, stdout = _stdio_trio()
    await _pump_trio(stdin, stdout, transform)


async def _relay_trio(url: str, up: Transform, down: Transform) -> None:
    import trio

    parts = urlsplit(url)
    sock = await trio.open_tcp_stream(parts.hostname or "127.0.0.1", parts.port or 80)
    await sock.send_all(upgrade_request(url))
    await _until(sock, b"\r\n\r\n")
    stdin, stdout = _stdio_trio()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump_trio, sock, stdout, down)
        await _pump_trio(stdin, sock, up)
        nursery.cancel_scope.cancel()


async def _hub_trio(command: list[str], up: Transform, down: Transform, announce: Announce) -> None:
    import trio

    agent = await trio.lowlevel.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    announce(listeners[0].socket.getsockname()[1])
    sock = await listeners[0].accept()
    await sock.send_all(upgrade_response(await _until(sock, b"\r\n\r\n")))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump_trio, agent.stdout, sock, down)
        await _pump_trio(sock, agent.stdin, up)
        nursery.cancel_scope.cancel()


async def _http_trio(command: list[str], announce: Announce) -> None:
    import trio

    agent = await trio.lowlevel.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    to_agent, from_agent = agent.stdin, agent.stdout
    assert to_agent is not None
    assert from_agent is not None
    queued: list[bytes] = []
    relay = HttpRelay(queued.append)

    async def serve(sock: Any) -> None:
        conn = h11.Connection(h11.SERVER)
        answers: list[bytes] = []
        while data := await sock.receive_some(READ_SIZE):
            relay.received(conn, data, answers.append)
            while queued:
                await to_agent.send_all(queued.pop(0))
            while conn.their_state is h11.DONE and not answers:  # sequential: one at a time
                relay.from_agent(bytes(await from_agent.receive_some(READ_SIZE)))
            while answers:
                await sock.send_all(answers.pop(0))

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    announce(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(serve, listeners)


# -- entry points ------------------------------------------------------------------------------


def _run(backend: str, asyncio_main: Any, trio_main: Any, *args: Any) -> None:
    if backend == "trio":
        import trio

        trio.run(functools.partial(trio_main, *args))
    else:
        asyncio.run(asyncio_main(*args))


def run_stdio(backend: str, transform: Transform) -> None:
    _run(backend, _agent_asyncio, _agent_trio, transform)


def run_relay(backend: str, url: str, up: Transform, down: Transform) -> None:
    _run(backend, _relay_asyncio, _relay_trio, url, up, down)


def run_hub(
    backend: str, command: list[str], up: Transform, down: Transform, announce: Announce
) -> None:
    _run(backend, _hub_asyncio, _hub_trio, command, up, down, announce)


def run_http(backend: str, command: list[str], announce: Announce) -> None:
    _run(backend, _http_asyncio, _http_trio, command, announce)
