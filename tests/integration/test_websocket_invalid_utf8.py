"""A text frame that is not UTF-8 fails the WebSocket connection with 1007 (RFC 6455 8.1).

Raw peers speak websockets' sans-I/O protocol over plain loopback sockets, so they
can send what our streams refuse to: against the echo agent's process, against the
server's end in process, and as a server towards our client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import msgspec
import pytest
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

from mesh.testing import spawn_echo_server
from transports import (
    CloseCode,
    HttpRequest,
    HttpResponse,
    TransportClosed,
    WebSocketStream,
    open_http_server,
    open_websocket,
    websocket_upgrade_handler,
)

pytestmark = pytest.mark.anyio

PING = b'{"type":"request","id":"p1","timestamp":1,"payload":{"method":"ping"}}'
NOT_UTF8 = b"\xc3\x28 is no character"


class RawPeer:
    """One end of a WebSocket connection that sends frames exactly as it is told."""

    def __init__(self, stream: anyio.abc.ByteStream, protocol: ClientProtocol | ServerProtocol):
        self.stream = stream
        self.protocol = protocol

    async def send(self, *frames: Frame) -> None:
        for frame in frames:
            self.protocol.send_frame(frame)
        await self.flush()

    async def flush(self) -> None:
        data = b"".join(self.protocol.data_to_send())
        if data:
            await self.stream.send(data)

    async def read_until_closed(self) -> list[Frame]:
        """Every frame until the connection ends (the peer closes TCP or sends its close)."""
        frames: list[Frame] = []
        while self.protocol.close_rcvd is None:
            try:
                data = await self.stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                self.protocol.receive_eof()
                break
            self.protocol.receive_data(data)
            frames += [e for e in self.protocol.events_received() if isinstance(e, Frame)]
        return frames

    @property
    def close_code(self) -> int | None:
        received = self.protocol.close_rcvd
        return received.code if received is not None else None


@asynccontextmanager
async def open_raw_client(url: str) -> AsyncIterator[RawPeer]:
    uri = parse_uri(url)
    protocol = ClientProtocol(uri)
    async with await anyio.connect_tcp(uri.host, uri.port) as stream:
        peer = RawPeer(stream, protocol)
        protocol.send_request(protocol.connect())
        await peer.flush()
        while not any(isinstance(e, Response) for e in protocol.events_received()):
            protocol.receive_data(await stream.receive())
        yield peer


def text(data: bytes, *, fin: bool = True) -> Frame:
    return Frame(Opcode.TEXT, data, fin=fin)


async def test_the_echo_agent_closes_1007_on_invalid_utf8_and_answers_nothing_of_it() -> None:
    async with spawn_echo_server() as server:
        with anyio.fail_after(10):
            async with open_raw_client(server.ws) as raw:
                await raw.send(text(NOT_UTF8))
                frames = await raw.read_until_closed()
            assert raw.close_code == CloseCode.INVALID_DATA
            assert [f for f in frames if f.opcode is Opcode.TEXT] == []
            # The agent lives on: a fresh connection is served.
            async with open_websocket(server.ws) as stream:
                await stream.send(PING)
                assert msgspec.json.decode(await stream.receive())["id"] == "p1"
        assert server.process.returncode is None


async def _no_http(request: HttpRequest) -> HttpResponse:
    return HttpResponse.error(404, "WebSocket only")


async def test_the_server_end_delivers_what_came_before_then_ends_with_1007() -> None:
    received: list[bytes] = []
    ended: list[TransportClosed] = []
    refused: list[ValueError] = []
    done = anyio.Event()

    async def handle(ws: WebSocketStream, agent: str | None) -> None:
        try:
            with pytest.raises(ValueError, match="must be UTF-8") as refusal:
                await ws.send(NOT_UTF8)  # and we never send such a frame ourselves
            refused.append(refusal.value)
            while True:
                received.append(await ws.receive())
        except TransportClosed as closed:
            ended.append(closed)
        finally:
            done.set()

    upgrade = websocket_upgrade_handler(handle, authenticator=None)
    async with open_http_server(_no_http, upgrade_handler=upgrade) as server:
        with anyio.fail_after(10):
            async with open_raw_client(server.ws_url + "/ws") as raw:
                await raw.send(
                    text(b"hello"),
                    text(b"caf\xc3", fin=False),  # a character split across fragments is fine
                    Frame(Opcode.CONT, b"\xa9"),
                    Frame(Opcode.BINARY, b"\xff binary frames carry any bytes"),
                    text(NOT_UTF8),
                    text(b"never read: nothing after the bad frame counts"),
                )
                await raw.read_until_closed()
                await done.wait()
    assert raw.close_code == CloseCode.INVALID_DATA
    assert received == [b"hello", "café".encode(), b"\xff binary frames carry any bytes"]
    [closed] = ended
    assert closed.close_code == CloseCode.INVALID_DATA
    assert "1007" in str(closed) and "UTF-8" in str(closed)
    assert len(refused) == 1


async def test_our_client_closes_1007_when_a_server_sends_invalid_utf8() -> None:
    closes: list[int | None] = []

    async def raw_server(
        stream: anyio.abc.ByteStream, request: HttpRequest, trailing: bytes
    ) -> None:
        protocol = ServerProtocol()
        head = [f"{request.method} {request.target} HTTP/1.1"]
        head += [f"{name}: {value}" for name, value in request.headers]
        protocol.receive_data(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + trailing)
        [parsed] = [e for e in protocol.events_received() if isinstance(e, Request)]
        protocol.send_response(protocol.accept(parsed))
        peer = RawPeer(stream, protocol)
        await peer.send(text(b'{"fine":"first"}'), text(NOT_UTF8))
        await peer.read_until_closed()
        closes.append(peer.close_code)

    async with open_http_server(_no_http, upgrade_handler=raw_server) as server:
        with anyio.fail_after(10):
            async with open_websocket(server.ws_url + "/ws") as client:
                assert await client.receive() == b'{"fine":"first"}'
                with pytest.raises(TransportClosed) as closed:
                    await client.receive()
            await server.wait_connections()
    assert closed.value.close_code == CloseCode.INVALID_DATA
    assert closes == [CloseCode.INVALID_DATA]
