"""Dialling a WebSocket that does not become one: each failure is a ConnectFailed that names
the URL and what went wrong, bounded by the connect timeout, with the socket closed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from mesh import open_agent_server
from mesh.agents.echo import agent as echo_agent
from transports import ConnectFailed, WebSocketConfig, open_websocket

pytestmark = pytest.mark.anyio

GUARD = 10.0


@asynccontextmanager
async def tcp_server(
    answer: Callable[[anyio.abc.SocketStream], Awaitable[None]],
) -> AsyncIterator[str]:
    """A loopback TCP server whose every connection ``answer`` handles; yields its ws:// URL."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await answer(stream)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        yield f"ws://127.0.0.1:{port}/ws"
        tg.cancel_scope.cancel()


async def test_a_path_the_server_does_not_serve_fails_the_handshake_with_its_status() -> None:
    async with open_agent_server(echo_agent) as server:
        url = server.ws_url + "/nowhere"
        with anyio.fail_after(GUARD), pytest.raises(ConnectFailed) as caught:
            async with open_websocket(url):
                pytest.fail("should not connect")
    assert "WebSocket handshake with" in str(caught.value) and "HTTP 404" in str(caught.value)


async def test_a_server_that_hangs_up_during_the_handshake() -> None:
    async def hang_up(stream: anyio.abc.SocketStream) -> None:
        await stream.receive()  # the request, then nothing: the socket closes

    async with tcp_server(hang_up) as url:
        with anyio.fail_after(GUARD), pytest.raises(ConnectFailed) as caught:
            async with open_websocket(url):
                pytest.fail("should not connect")
    assert "closed during the WebSocket handshake" in str(caught.value)


async def test_a_server_that_never_answers_the_handshake_is_bounded() -> None:
    async def silent(stream: anyio.abc.SocketStream) -> None:
        await stream.receive()
        await anyio.sleep_forever()  # holds the connection without answering

    config = WebSocketConfig(connect_timeout=0.3)
    async with tcp_server(silent) as url:
        with anyio.fail_after(GUARD), pytest.raises(ConnectFailed) as caught:
            async with open_websocket(url, config=config):
                pytest.fail("should not connect")
    assert f"cannot connect to {url}" in str(caught.value)
    assert "no handshake within 0.3 s" in str(caught.value)
