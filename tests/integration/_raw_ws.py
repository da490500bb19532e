"""A bare, standard WebSocket client for tests: websockets' sans-I/O protocol over a socket.

It shows every frame the server sends, pings included (the mesh's own stream
hides them), and answers pings as any standard client does. So a test can hold
a stream through N of the server's keepalive rounds by counting its pings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import anyio.abc
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri


class RawWebSocket:
    def __init__(self, stream: anyio.abc.ByteStream, protocol: ClientProtocol) -> None:
        self._stream = stream
        self._protocol = protocol
        self._frames: list[Frame] = []
        #: The server's handshake response (its headers).
        self.response: Response | None = None

    async def receive_frame(self) -> Frame:
        """The next frame from the server (pongs to its pings are sent before returning)."""
        while not self._frames:
            try:
                data = await self._stream.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                self._protocol.receive_eof()
            else:
                self._protocol.receive_data(data)
            events = self._protocol.events_received()
            self._frames.extend(e for e in events if isinstance(e, Frame))
            outgoing = b"".join(self._protocol.data_to_send())
            if outgoing:
                await self._stream.send(outgoing)
            if not self._frames and self._protocol.close_exc is not None:
                raise AssertionError(f"closed without a close frame: {self._protocol.close_exc}")
        return self._frames.pop(0)

    async def send_text(self, data: bytes) -> None:
        self._protocol.send_text(data)
        await self._stream.send(b"".join(self._protocol.data_to_send()))

    async def hold(self, pings: int) -> list[bytes]:
        """Answer ``pings`` of the server's keepalive pings; returns the data frames seen.

        Fails if the server closes the stream meanwhile.
        """
        seen = 0
        data: list[bytes] = []
        while seen < pings:
            frame = await self.receive_frame()
            if frame.opcode is Opcode.PING:
                seen += 1
            elif frame.opcode is Opcode.CLOSE:
                raise AssertionError(f"the server closed the stream: {frame}")
            elif frame.opcode in (Opcode.TEXT, Opcode.BINARY):
                data.append(bytes(frame.data))
        return data


@asynccontextmanager
async def open_raw_websocket(
    url: str, headers: Sequence[tuple[str, str]] = ()
) -> AsyncIterator[RawWebSocket]:
    uri = parse_uri(url)
    protocol = ClientProtocol(uri)
    async with await anyio.connect_tcp(uri.host, uri.port) as stream:
        request = protocol.connect()
        for name, value in headers:
            request.headers[name] = value
        protocol.send_request(request)
        await stream.send(b"".join(protocol.data_to_send()))
        ws = RawWebSocket(stream, protocol)
        while True:
            protocol.receive_data(await stream.receive(65536))
            events = protocol.events_received()
            if any(isinstance(e, Response) for e in events):
                ws.response = next(e for e in events if isinstance(e, Response))
                ws._frames.extend(e for e in events if isinstance(e, Frame))
                break
        assert protocol.handshake_exc is None, protocol.handshake_exc
        yield ws
