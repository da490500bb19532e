"""Connected pairs of frame streams over every transport, for ``transports.testing``.

Each factory yields two streams whose frames reach each other: memory (roomy and
clogged), stdio (two child processes joined by FIFOs), WebSocket (a client and
the server's end of the same connection) and HTTP (the client, and the server's
``POST /rpc`` handler wrapped as a stream that answers each request in turn).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import anyio

from transports import (
    FrameStream,
    HttpRequest,
    HttpResponse,
    HttpServerConfig,
    TransportClosed,
    TransportInfo,
    WebSocketConfig,
    WebSocketStream,
    memory_stream_pair,
    open_http_client,
    open_http_server,
    open_stdio_process,
    open_websocket,
    websocket_upgrade_handler,
)
from transports.testing import PairFactory

#: Not a round number: frames at the limit straddle the transports' 64 KiB reads.
LIMIT: Final = 300_007
RELAY: Final = Path(__file__).with_name("_relay.py")

Pair = AsyncIterator[tuple[FrameStream, FrameStream]]


@asynccontextmanager
async def open_memory_pair(*, buffer: float = math.inf) -> Pair:
    a, b = memory_stream_pair(max_frame_size=LIMIT, buffer=buffer)
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


@asynccontextmanager
async def open_clogged_memory_pair() -> Pair:
    """No buffer at all: every send waits for a receiver, send_nowait queues."""
    async with open_memory_pair(buffer=0) as pair:
        yield pair


@asynccontextmanager
async def open_stdio_pair() -> Pair:
    with tempfile.TemporaryDirectory() as tmp:
        a_to_b, b_to_a = os.path.join(tmp, "a-to-b"), os.path.join(tmp, "b-to-a")
        os.mkfifo(a_to_b)
        os.mkfifo(b_to_a)
        relay = [sys.executable, "-I", "-S", str(RELAY)]
        async with (
            open_stdio_process(relay[0], [*relay[1:], b_to_a, a_to_b], max_frame_size=LIMIT) as a,
            open_stdio_process(relay[0], [*relay[1:], a_to_b, b_to_a], max_frame_size=LIMIT) as b,
        ):
            yield a, b


async def _no_http(request: HttpRequest) -> HttpResponse:
    return HttpResponse.error(404, "WebSocket only")


@asynccontextmanager
async def open_websocket_pair() -> Pair:
    """(client, server's end) of one connection over loopback."""
    config = WebSocketConfig(max_frame_size=LIMIT)
    hand_over, accepted = anyio.create_memory_object_stream[WebSocketStream](1)
    done = anyio.Event()

    async def handle(ws: WebSocketStream, agent: str | None) -> None:
        await hand_over.send(ws)
        await done.wait()  # the server's end lives as long as the pair

    upgrade = websocket_upgrade_handler(handle, authenticator=None, config=config)
    with hand_over, accepted:
        async with (
            open_http_server(_no_http, upgrade_handler=upgrade) as server,
            open_websocket(server.ws_url + "/ws", config=config) as client,
        ):
            server_end = await accepted.receive()
            try:
                yield client, server_end
            finally:
                done.set()


class _Answer:
    __slots__ = ("frame", "ready")

    def __init__(self) -> None:
        self.ready = anyio.Event()
        self.frame = b""


class HttpAnswerer:
    """The server's end of HTTP as a frame stream: each POST body is a frame received,
    and each frame sent answers the oldest request still unanswered (with 200)."""

    def __init__(self, *, max_frame_size: int) -> None:
        self._max = max_frame_size
        self._arrive, self._arrived = anyio.create_memory_object_stream[tuple[bytes, _Answer]](
            math.inf
        )
        self._unanswered: deque[_Answer] = deque()
        self._info = TransportInfo("http", "the server's end")

    @property
    def info(self) -> TransportInfo:
        return self._info

    @property
    def max_frame_size(self) -> int:
        return self._max

    async def handle(self, request: HttpRequest) -> HttpResponse:
        answer = _Answer()
        await self._arrive.send((request.body, answer))
        await answer.ready.wait()
        return HttpResponse(200, answer.frame)

    async def receive(self) -> bytes:
        try:
            frame, answer = await self._arrived.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise TransportClosed("closed") from None
        self._unanswered.append(answer)
        return frame

    async def send(self, frame: bytes) -> None:
        self.send_nowait((frame,))

    async def send_many(self, frames: Sequence[bytes]) -> None:
        self.send_nowait(frames)

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        for frame in frames:
            if not self._unanswered:
                raise AssertionError("an answer with no request to answer")
            answer = self._unanswered.popleft()
            answer.frame = frame
            answer.ready.set()
        return True

    async def aclose(self) -> None:
        self._arrive.close()
        self._arrived.close()


@asynccontextmanager
async def open_http_pair() -> Pair:
    """(client, server's end): request/reply, for ``check_request_reply_stream``."""
    answerer = HttpAnswerer(max_frame_size=LIMIT)
    config = HttpServerConfig(max_body_size=LIMIT)
    async with (
        open_http_server(answerer.handle, config=config) as server,
        open_http_client(server.url, max_frame_size=LIMIT) as client,
    ):
        try:
            yield client, answerer
        finally:
            await answerer.aclose()


#: Every duplex transport the package has, for ``check_frame_stream``.
DUPLEX_PAIRS: Final[dict[str, PairFactory]] = {
    "memory": open_memory_pair,
    "memory-clogged": open_clogged_memory_pair,
    "stdio": open_stdio_pair,
    # The checks send and close from each end in turn: client to server and back.
    "websocket": open_websocket_pair,
}
#: Request/reply transports, for ``check_request_reply_stream``.
REQUEST_REPLY_PAIRS: Final[dict[str, PairFactory]] = {"http": open_http_pair}
