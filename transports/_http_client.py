"""The HTTP transport's client side: each frame is one ``POST {endpoint}/rpc``.

The reply body (if any; 204 means none) is the next frame received. Every POST
runs in its own task, so many calls are in flight at once over httpx's pool of
keep-alive connections. A connection failure ends the stream (the mesh's
reconnect logic then decides what to do); an HTTP error status for one POST
surfaces as :class:`FrameRejected` and the stream carries on.
"""

from __future__ import annotations

import json
import math
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Final

import anyio
import anyio.abc
import httpx

from transports._base import DEFAULT_MAX_FRAME_SIZE, FrameRejected, TransportClosed, TransportInfo
from transports._groups import unwrap_single_error

__all__ = ["HttpClientStream", "open_http_client"]

_HEAD: Final = 512
#: Connect and read deadlines for one POST. The mesh's own call deadline is the
#: real bound; these only stop a dead socket from holding a task forever.
CONNECT_TIMEOUT: Final = 10.0
READ_TIMEOUT: Final = 3600.0


class HttpClientStream:
    """Frames over HTTP POSTs. Opened by :func:`open_http_client`."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        tasks: anyio.abc.TaskGroup,
        *,
        headers: dict[str, str],
        max_frame_size: int,
    ) -> None:
        self._client = client
        self._url = url
        self._tasks = tasks
        self._headers = headers
        self._max = max_frame_size
        self._info = TransportInfo("http", url)
        self._send_replies, self._replies = anyio.create_memory_object_stream[bytes | Exception](
            math.inf
        )
        self._closed: TransportClosed | None = None

    @property
    def info(self) -> TransportInfo:
        return self._info

    @property
    def max_frame_size(self) -> int:
        return self._max

    async def send(self, frame: bytes) -> None:
        await self.send_many((frame,))

    async def send_many(self, frames: Sequence[bytes]) -> None:
        if self._closed is not None:
            raise self._closed
        for frame in frames:
            self._tasks.start_soon(self._post, frame)

    async def receive(self) -> bytes:
        if self._closed is not None and not self._replies.statistics().current_buffer_used:
            raise self._closed
        try:
            item = await self._replies.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise self._closed or TransportClosed("closed") from None
        if isinstance(item, Exception):
            raise item
        return item

    async def _post(self, frame: bytes) -> None:
        try:
            response = await self._client.post(self._url, content=frame, headers=self._headers)
        except httpx.TransportError as exc:
            self._fail(TransportClosed(f"cannot reach {self._url}: {exc!r}"))
            return
        status = response.status_code
        if status == 200:
            body = response.content
            if body:
                self._deliver(body)
        elif status != 204:
            self._deliver(FrameRejected(status, _error_message(response), frame[:_HEAD]))

    def _deliver(self, item: bytes | Exception) -> None:
        # Closed while the reply was in flight: nobody is listening any more.
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._send_replies.send_nowait(item)

    def _fail(self, reason: TransportClosed) -> None:
        if self._closed is None:
            self._closed = reason
            self._deliver(reason)

    async def aclose(self) -> None:
        if self._closed is None:
            self._closed = TransportClosed("closed")
        self._tasks.cancel_scope.cancel()
        self._send_replies.close()
        self._replies.close()


def _error_message(response: httpx.Response) -> str:
    """The server's own words if it sent our JSON error body, else the status line."""
    try:
        payload = json.loads(response.content)
        error = payload["error"] if "error" in payload else payload["payload"]["error"]
        message = error["message"]
        if isinstance(message, str):
            return message
    except (ValueError, KeyError, TypeError):
        pass
    return response.reason_phrase or "error"


@asynccontextmanager
async def open_http_client(
    endpoint: str,
    *,
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_connections: int = 100,
    client: httpx.AsyncClient | None = None,
) -> AsyncIterator[HttpClientStream]:
    """A frame stream to an agent's HTTP endpoint (``POST {endpoint}/rpc``)."""
    url = endpoint.rstrip("/") + "/rpc"
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    owned = client is None
    http = client or httpx.AsyncClient(
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT),
        verify=ssl_context if ssl_context is not None else True,
    )
    try:
        with unwrap_single_error():
            async with anyio.create_task_group() as tg:
                stream = HttpClientStream(
                    http, url, tg, headers=headers, max_frame_size=max_frame_size
                )
                try:
                    yield stream
                finally:
                    await stream.aclose()
    finally:
        if owned:
            with anyio.CancelScope(shield=True):
                await http.aclose()
