"""Token auth and TLS on WebSocket links, against real loopback sockets."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import trustme

from mesh import Unauthorized, open_agent_server, open_websocket_peer
from tests.faults._helpers import recording_agent
from transports import (
    CloseCode,
    ConnectFailed,
    HttpRequest,
    HttpResponse,
    HttpServer,
    TokenAuthenticator,
    TransportClosed,
    WebSocketStream,
    open_http_server,
    open_websocket,
    websocket_upgrade_handler,
)

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def guarded_server(tokens: TokenAuthenticator, calls: list[str]) -> AsyncIterator[HttpServer]:
    async with open_agent_server(recording_agent(calls), tokens=tokens) as server:
        yield server


TOUCH = (
    b'{"type":"request","id":"r1","timestamp":1,'
    b'"payload":{"method":"tools/call","params":{"name":"touch","arguments":{}}}}'
)


async def _closed_with(url: str, **kwargs: Any) -> int | None:
    """Dial and send a tool call: the close code that ended the link, or None if answered."""
    async with open_websocket(url, **kwargs) as stream:
        with anyio.fail_after(5):
            try:
                # The close may come in the same read as the 101: then the send fails.
                await stream.send(TOUCH)
                await stream.receive()
            except TransportClosed as closed:
                return closed.close_code
        return None


async def test_missing_wrong_and_revoked_tokens_are_closed_4001_before_any_message() -> None:
    calls: list[str] = []
    tokens = TokenAuthenticator({"good": "guarded", "soon-revoked": "guarded"})
    async with guarded_server(tokens, calls) as server:
        url = server.ws_url + "/ws"
        assert await _closed_with(url) == CloseCode.UNAUTHORIZED
        assert await _closed_with(url, token="wrong") == CloseCode.UNAUTHORIZED
        assert tokens.revoke("soon-revoked")
        assert await _closed_with(url, token="soon-revoked") == CloseCode.UNAUTHORIZED
        assert calls == []
        assert await _closed_with(url, token="good", token_in_query=True) is None
    assert calls == ["r1"]  # the one call with a good token ran; none of the others


async def test_no_message_of_a_rejected_connection_reaches_a_handler() -> None:
    calls: list[str] = []
    async with guarded_server(TokenAuthenticator({"good": "guarded"}), calls) as server:
        for token in (None, "bad"):
            with pytest.raises(Unauthorized, match="4001") as refused:
                async with open_websocket_peer(server.ws_url + "/ws", token=token, agent="guarded"):
                    pass
            assert refused.value.close_code == CloseCode.UNAUTHORIZED
    assert calls == []


async def test_a_token_speaking_as_another_agent_is_closed_4003() -> None:
    calls: list[str] = []
    tokens = TokenAuthenticator({"mine": "guarded"})
    async with guarded_server(tokens, calls) as server:
        code = await _closed_with(
            server.ws_url + "/ws", token="mine", headers=[("X-Agent-Id", "someone-else")]
        )
    assert code == CloseCode.FORBIDDEN
    assert calls == []


async def test_a_good_token_gets_through() -> None:
    calls: list[str] = []
    async with (
        guarded_server(TokenAuthenticator({"good": "guarded"}), calls) as server,
        open_websocket_peer(server.ws_url + "/ws", token="good", agent="guarded") as peer,
    ):
        assert await peer.call_tool("touch") == "touched"
    assert len(calls) == 1


async def test_tokens_are_never_logged() -> None:
    from structlog.testing import capture_logs

    calls: list[str] = []
    with capture_logs() as logs:
        async with guarded_server(
            TokenAuthenticator({"top-secret-token": "guarded"}), calls
        ) as server:
            await _closed_with(server.ws_url + "/ws", token="a-wrong-secret")
    assert logs, "the rejection should be logged"
    assert "a-wrong-secret" not in repr(logs) and "top-secret-token" not in repr(logs)


async def test_tls_round_trip_with_a_generated_certificate() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)

    async def echo(stream: WebSocketStream, agent_id: str | None) -> None:
        while True:
            frame = await stream.receive()
            await stream.send(b"tls:" + frame)

    async def nothing(request: HttpRequest) -> HttpResponse:
        return HttpResponse.json(200, {"secure": True})

    upgrade = websocket_upgrade_handler(echo, authenticator=None)
    async with open_http_server(
        nothing, upgrade_handler=upgrade, ssl_context=server_context
    ) as server:
        assert server.ws_url.startswith("wss://")
        async with open_websocket(server.ws_url + "/ws", ssl_context=client_context) as stream:
            await stream.send(b"hello")
            with anyio.fail_after(5):
                assert await stream.receive() == b"tls:hello"
        # Without trusting the CA, the handshake fails and says why.
        with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
            async with open_websocket(
                server.ws_url + "/ws", ssl_context=ssl.create_default_context()
            ):
                pass


async def test_tls_for_a_whole_agent_connection() -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    calls: list[str] = []
    async with (
        open_agent_server(recording_agent(calls), ssl_context=server_context) as server,
        open_websocket_peer(
            server.ws_url + "/ws", ssl_context=client_context, agent="guarded"
        ) as peer,
    ):
        assert await peer.call_tool("touch") == "touched"
