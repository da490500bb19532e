"""A real HTTP/1.1 server on 127.0.0.1 that plays scripted replies and records requests.

h11 does the HTTP; anyio does the sockets, so the server runs on asyncio and
trio alike, inside the test's own task group (``serve_fake_provider`` opens
one). Each request takes the next ``Reply`` in order; a reply can also hang
(to provoke a client timeout) or drop the connection without answering. Once
the script runs out, every request gets a 599 that names the problem, so a test
that sends more than it planned fails loudly.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import h11
import msgspec

__all__ = ["FakeServer", "RecordedRequest", "Reply", "closed_port", "serve_fake_provider"]

#: Large enough for any request body these tests send.
_READ_SIZE = 65536


@dataclass(frozen=True)
class Reply:
    """One scripted answer. ``json`` wins over ``body`` when both are given."""

    status: int = 200
    json: Any = None
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    hang: bool = False
    drop: bool = False
    #: Send the head and the body, then close as if more were coming (a cut-off stream).
    cut: bool = False

    def payload(self) -> bytes:
        return msgspec.json.encode(self.json) if self.json is not None else self.body


@dataclass(frozen=True)
class RecordedRequest:
    """What the client sent: header names are lower-cased."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return msgspec.json.decode(self.body)


class FakeServer:
    """The server's state: the replies still to play and the requests seen so far."""

    def __init__(self, port: int, replies: Iterable[Reply]) -> None:
        self.port = port
        self.requests: list[RecordedRequest] = []
        self._replies = deque(replies)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    async def handle_connection(self, stream: anyio.abc.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                request = await _read_request(connection, stream)
                if request is None:
                    return
                self.requests.append(request)
                reply = self._next_reply()
                if reply.drop:
                    return
                if reply.hang:
                    await anyio.sleep_forever()
                await _send_reply(connection, stream, reply)
                if reply.cut:
                    return
                if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                    return
                connection.start_next_cycle()

    def _next_reply(self) -> Reply:
        if self._replies:
            return self._replies.popleft()
        return Reply(status=599, json={"error": "fake server: no scripted reply left"})


async def _read_request(
    connection: h11.Connection, stream: anyio.abc.SocketStream
) -> RecordedRequest | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive(_READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                data = b""
            connection.receive_data(data)
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            headers = {name.decode().lower(): value.decode() for name, value in head.headers}
            return RecordedRequest(
                method=head.method.decode(),
                target=head.target.decode(),
                headers=headers,
                body=bytes(body),
            )
        elif isinstance(event, h11.ConnectionClosed):
            return None


async def _send_reply(
    connection: h11.Connection, stream: anyio.abc.SocketStream, reply: Reply
) -> None:
    payload = reply.payload()
    promised = len(payload) + (4096 if reply.cut else 0)
    headers = {"content-type": "application/json", "content-length": str(promised)}
    headers.update(reply.headers)
    head = h11.Response(status_code=reply.status, headers=list(headers.items()))
    await stream.send(connection.send(head))
    await stream.send(connection.send(h11.Data(data=payload)))
    if not reply.cut:
        await stream.send(connection.send(h11.EndOfMessage()))


@asynccontextmanager
async def serve_fake_provider(*replies: Reply) -> AsyncIterator[FakeServer]:
    """Listen on an ephemeral loopback port for the duration of the ``async with``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    server = FakeServer(port, replies)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle_connection)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


async def closed_port() -> int:
    """A loopback port that was just bound and released: connecting to it is refused."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()
    return port
