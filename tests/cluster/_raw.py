"""A raw nats-py client logged in as one daemon: what a stolen NATS credential can do.

It runs on the cluster's own NATS loop (nats-py is asyncio-only; on trio that loop is
a thread of its own), so the tests that use it run on both backends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio

from mesh.cluster._bridge import NatsLoop, open_nats_loop
from tests.cluster._helpers import SPREAD_TIMEOUT

T = TypeVar("T")


class RawDaemon:
    """A nats-py client as ``daemon-<id>``; every call runs on the NATS loop."""

    def __init__(self, loop: NatsLoop) -> None:
        self.loop = loop
        self.nc: Any = None
        self.errors: list[str] = []
        self._news = anyio.Event()

    async def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        return await self.loop.run(factory)

    def _note(self, error: str) -> None:
        self.errors.append(error)
        self._news.set()

    async def refused(self, kind: str, subject: str) -> None:
        """Until the server says it refused this client a ``kind`` ("publish" or
        "subscription") on ``subject``."""
        wanted = f'violation for {kind} to "{subject.lower()}"'  # nats-py lowercases it
        with anyio.fail_after(SPREAD_TIMEOUT):
            while not any(wanted in error for error in self.errors):
                self._news = anyio.Event()
                await self._news.wait()


@asynccontextmanager
async def open_raw_daemon(url: str, daemon: str, password: str) -> AsyncIterator[RawDaemon]:
    import nats

    async with open_nats_loop() as loop:
        raw = RawDaemon(loop)

        async def on_error(exc: Exception) -> None:
            loop.to_mesh(raw._note, str(exc))

        raw.nc = await loop.run(
            lambda: nats.connect(
                url,
                user=f"daemon-{daemon}",
                password=password,
                error_cb=on_error,
                inbox_prefix=f"_INBOX_mesh.mesh.{daemon}",
                allow_reconnect=False,
            )
        )
        try:
            yield raw
        finally:
            await loop.run(raw.nc.close)


def link_request(method: str, params: Any, request_id: str = "r1") -> bytes:
    """A request frame as one daemon sends another on the link between them."""
    from mesh.protocol import MESH_CODEC, Request, RequestId, RequestPayload, now_ms

    payload = RequestPayload(method=method, params=params)
    return MESH_CODEC.encode(Request(id=RequestId(request_id), timestamp=now_ms(), payload=payload))


def link_response(request_id: str, result: Any) -> bytes:
    """An answer frame, as a daemon answers a request on the link."""
    from mesh.protocol import MESH_CODEC, Response, ResponsePayload, now_ms

    payload = ResponsePayload(success=True, result=result)
    return MESH_CODEC.encode(Response(id=request_id, timestamp=now_ms(), payload=payload))


def link_frames(message: bytes) -> list[Any]:
    """What a message on the link says, frame by frame (Requests, Responses, Notifications):
    a daemon sends the frames queued for a peer in one message, a line each, so a call may
    share its message with a heartbeat or an answer when the machine is busy."""
    from mesh.protocol import MESH_CODEC

    return [MESH_CODEC.decode(line) for line in message.split(b"\n") if line]


def link_cancel(request_id: str) -> bytes:
    """A ``cancelled`` notification for ``request_id``, as a caller that gave up sends it."""
    from mesh.protocol import MESH_CODEC, Notification, NotificationPayload, RequestId, now_ms

    payload = NotificationPayload(method="cancelled", params={"id": request_id, "reason": "x"})
    return MESH_CODEC.encode(Notification(id=RequestId("n1"), timestamp=now_ms(), payload=payload))
