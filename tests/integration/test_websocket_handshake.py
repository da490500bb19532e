"""The WebSocket opening handshake, checked and written by us on both sides.

The accepting side checks RFC 6455's rules from the head the HTTP server parsed and
writes its 101 from a template; the dialling side writes its request and checks the
101 itself. So: a standard client (websockets' own) opens a link to our server and a
standard server accepts our client, and every broken rule is refused with the status
websockets gives and a reason that names it, on either side.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress

import anyio
import anyio.abc
import pytest
from websockets.sync.client import connect as sync_connect
from websockets.sync.server import ServerConnection
from websockets.sync.server import serve as sync_serve

from tests.integration.test_websocket_dial import tcp_server
from transports import (
    ConnectFailed,
    HttpResponse,
    TransportClosed,
    WebSocketConfig,
    WebSocketStream,
    open_http_server,
    open_websocket,
    websocket_upgrade_handler,
)
from transports._ws_handshake import accept_key

pytestmark = pytest.mark.anyio

GUARD = 10.0
KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 1.3's sample key


async def _echo(ws: WebSocketStream, agent_id: str | None) -> None:
    # Ends when the client leaves, before the server may stop: not raced by its cancel.
    with suppress(TransportClosed):
        while True:
            await ws.send(b"echo:" + await ws.receive())


@asynccontextmanager
async def echo_server() -> AsyncIterator[tuple[int, str]]:
    """Our HTTP server with the WebSocket upgrade on /ws, echoing; yields (port, ws URL)."""

    async def routes(request: object) -> HttpResponse:
        return HttpResponse.error(404, "only /ws")

    upgrade = websocket_upgrade_handler(_echo, authenticator=None)
    async with open_http_server(routes, upgrade_handler=upgrade) as server:
        yield server.port, f"{server.ws_url}/ws"


@contextmanager
def websockets_echo_server() -> Iterator[str]:
    """websockets' own server (its sync flavour, in a thread), echoing; yields its URL."""

    def echo(connection: ServerConnection) -> None:
        for message in connection:
            connection.send(f"echo:{message!s}")

    with sync_serve(echo, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}/"
        finally:
            server.shutdown()
            thread.join(GUARD)


async def test_a_websockets_client_opens_a_link_to_our_server_and_gets_mesh_selected() -> None:
    def talk(url: str) -> tuple[str | None, str]:
        # websockets' defaults: it offers permessage-deflate, which the mesh declines.
        with sync_connect(url, subprotocols=["mesh"], open_timeout=GUARD) as ws:  # type: ignore[list-item]
            ws.send("hi")
            return ws.subprotocol, str(ws.recv(timeout=GUARD))

    async with echo_server() as (_, url):
        with anyio.fail_after(GUARD):
            subprotocol, answer = await anyio.to_thread.run_sync(talk, url)
    assert (subprotocol, answer) == ("mesh", "echo:hi")


async def test_our_client_opens_a_link_to_a_websockets_server() -> None:
    with websockets_echo_server() as url:
        with anyio.fail_after(GUARD):
            async with open_websocket(url) as ws:
                await ws.send(b"hi")
                assert await ws.receive() == b"echo:hi"


async def test_our_client_gets_the_frames_that_came_with_the_101() -> None:
    async def switch_then_speak(stream: anyio.abc.SocketStream) -> None:
        request = await stream.receive()
        key = request.split(b"Sec-WebSocket-Key: ")[1].split(b"\r\n")[0].decode()
        await stream.send(_switch(key) + b"\x81\x05hello")  # a text frame in the same write
        await anyio.sleep_forever()

    async with tcp_server(switch_then_speak) as url:
        with anyio.fail_after(GUARD):
            async with open_websocket(url, config=WebSocketConfig(ping_interval=None)) as ws:
                assert await ws.receive() == b"hello"


# -- the accepting side's refusals --------------------------------------------------------


def _request(*lines: str, method: str = "GET", version: str = "1.1") -> bytes:
    head = [f"{method} /ws HTTP/{version}", "Host: 127.0.0.1", *lines]
    return ("\r\n".join(head) + "\r\n\r\n").encode()


_GOOD = ("Upgrade: websocket", "Connection: Upgrade", f"Sec-WebSocket-Key: {KEY}")
_V13 = "Sec-WebSocket-Version: 13"


@pytest.mark.parametrize(
    ("request_bytes", "status", "rule"),
    [
        pytest.param(_request(*_GOOD, _V13, method="POST"), 405, "a GET, not POST", id="post"),
        pytest.param(
            _request(*_GOOD, _V13, version="1.0"), 505, "HTTP/1.1, not HTTP/1.0", id="http-1.0"
        ),
        pytest.param(
            _request("Upgrade: websocket", f"Sec-WebSocket-Key: {KEY}", _V13),
            426,
            "Connection must list `upgrade`",
            id="no-connection-upgrade",
        ),
        pytest.param(
            _request(*_GOOD[:2], _V13),
            400,
            "Sec-WebSocket-Key must be sent once (missing)",
            id="no-key",
        ),
        pytest.param(
            _request(*_GOOD, f"Sec-WebSocket-Key: {KEY}", _V13),
            400,
            "Sec-WebSocket-Key must be sent once (sent 2 times)",
            id="two-keys",
        ),
        pytest.param(
            _request(
                "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: c2hvcnQ=", _V13
            ),
            400,
            "Sec-WebSocket-Key must be the base64 of 16 bytes",
            id="short-key",
        ),
        pytest.param(
            _request(*_GOOD[:2], "Sec-WebSocket-Key: !!", _V13),
            400,
            "Sec-WebSocket-Key must be the base64 of 16 bytes",
            id="not-base64-key",
        ),
        pytest.param(
            _request(*_GOOD, "Sec-WebSocket-Version: 8"),
            400,
            "Sec-WebSocket-Version must be 13",
            id="version-8",
        ),
        pytest.param(
            _request(*_GOOD),
            400,
            "Sec-WebSocket-Version must be 13, sent once (missing)",
            id="no-version",
        ),
        pytest.param(
            _request(*_GOOD, _V13, "Sec-WebSocket-Protocol: mesh, a b"),
            400,
            "Sec-WebSocket-Protocol must be a list of tokens",
            id="bad-subprotocol",
        ),
        pytest.param(
            _request(*_GOOD, _V13, "Origin: http://a", "Origin: http://b"),
            400,
            "Origin must be sent at most once",
            id="two-origins",
        ),
    ],
)
async def test_a_broken_upgrade_is_refused_in_http_naming_the_rule(
    request_bytes: bytes, status: int, rule: str
) -> None:
    async with echo_server() as (port, _):
        with anyio.fail_after(GUARD):
            answer = await _exchange(port, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].startswith(b"HTTP/1.1 %d " % status), answer
    assert b"Connection: close" in head
    assert rule in body.decode(), body
    if status == 426:
        assert b"Upgrade: websocket" in head
    if "Version" in rule:  # RFC 6455 4.4: the version the server speaks
        assert b"Sec-WebSocket-Version: 13" in head


async def test_a_good_upgrade_is_answered_with_the_accept_key_and_no_date() -> None:
    async with echo_server() as (port, _):
        with anyio.fail_after(GUARD):
            answer = await _exchange(port, _request(*_GOOD, _V13), until=b"\r\n\r\n")
    lines = answer.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 101 Switching Protocols"
    assert b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in lines  # RFC 6455 1.3
    names = [line.partition(b":")[0].lower() for line in lines[1:]]
    assert b"sec-websocket-extensions" not in names and b"date" not in names


async def _exchange(port: int, request: bytes, until: bytes | None = None) -> bytes:
    """Send ``request`` on a fresh connection; what comes back until ``until`` or the close."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        answer = b""
        while until is None or until not in answer:
            try:
                answer += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                break
    return answer


# -- the dialling side's refusals ---------------------------------------------------------


def _switch(key: str, *, drop: str = "", add: str = "") -> bytes:
    lines = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {accept_key(key)}",
    ]
    lines = [line for line in lines if not drop or not line.startswith(drop)]
    if add:
        lines.append(add)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.parametrize(
    ("answer", "rule"),
    [
        pytest.param(
            lambda key: _switch(key, drop="Sec-WebSocket-Accept", add="Sec-WebSocket-Accept: AAAA"),
            "its Sec-WebSocket-Accept does not answer our key",
            id="wrong-accept",
        ),
        pytest.param(
            lambda key: _switch(key, drop="Upgrade"),
            "its Upgrade is not `websocket`",
            id="no-upgrade",
        ),
        pytest.param(
            lambda key: _switch(key, drop="Connection"),
            "its Connection does not list `upgrade`",
            id="no-connection",
        ),
        pytest.param(
            lambda key: _switch(key, add="Sec-WebSocket-Extensions: permessage-deflate"),
            "it names an extension, and none was offered",
            id="extension",
        ),
        pytest.param(
            lambda key: _switch(key, add="Sec-WebSocket-Protocol: chat"),
            "its Sec-WebSocket-Protocol is not one we offered",
            id="subprotocol",
        ),
        pytest.param(
            lambda key: b"SSH-2.0-OpenSSH\r\n\r\n",
            "the response is not HTTP/1.1 (not an HTTP/1.1 status line)",
            id="not-http",
        ),
        pytest.param(
            lambda key: b"HTTP/1.1 101 Switching Protocols\r\n" + b"X: y\r\n" * 2000,
            "response head exceeds 8192 bytes",
            id="endless-head",
        ),
    ],
)
async def test_a_broken_101_fails_the_dial_naming_the_rule(answer: object, rule: str) -> None:
    async def reply(stream: anyio.abc.SocketStream) -> None:
        request = await stream.receive()
        key = request.split(b"Sec-WebSocket-Key: ")[1].split(b"\r\n")[0].decode()
        await stream.send(answer(key))  # type: ignore[operator]
        await anyio.sleep_forever()

    async with tcp_server(reply) as url:
        with anyio.fail_after(GUARD), pytest.raises(ConnectFailed) as caught:
            async with open_websocket(url):
                pytest.fail("should not connect")
    assert f"WebSocket handshake with {url} failed" in str(caught.value)
    assert rule in str(caught.value)
