"""A WebSocket link is up in one round trip: ``agent/info`` is asked in the handshake.

The client offers the call in a request header (``INFO_OFFER``, the call's id as its
value); a server that takes it up echoes the header in its 101 response and answers
the call first thing, as if its frame had come. Either side without it keeps the
request/response path: an old client sends no offer and is answered only what it
asks; an old server ignores the offer and the client asks once the link is open.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from websockets.frames import Opcode
from websockets.protocol import Protocol

from mesh import (
    Agent,
    CallTimeout,
    ConnectFailed,
    open_agent_server,
    open_websocket_peer,
    serve_peer,
)
from mesh._rpc.connect import INFO_OFFER
from mesh.protocol import (
    MESH_CODEC,
    Notification,
    Request,
    RequestPayload,
    Response,
    ResponsePayload,
)
from tests.integration._raw_ws import RawWebSocket, open_raw_websocket
from transports import (
    HttpResponse,
    TokenAuthenticator,
    WebSocketStream,
    _http_server,
    _sockets,
    _websocket,
    open_http_server,
    websocket_upgrade_handler,
)

pytestmark = pytest.mark.anyio

GUARD = 20.0
ASKED = "9b2f7c1e-5d3a-4c8e-9f10-2a6b7c8d9e0f"


def _agent() -> Agent:
    return Agent("teller", description="says who it is")


async def _first_message(ws: RawWebSocket) -> Any:
    while True:
        frame = await ws.receive_frame()
        if frame.opcode is Opcode.CLOSE:
            return frame
        if frame.opcode is Opcode.TEXT:
            return MESH_CODEC.decode(bytes(frame.data))


def _ping(rid: str) -> bytes:
    return MESH_CODEC.encode(Request(id=rid, timestamp=0, payload=RequestPayload(method="ping")))


async def test_the_server_answers_agent_info_offered_in_the_handshake_before_anything_is_sent() -> (
    None
):
    async with open_agent_server(_agent()) as server:
        with anyio.fail_after(GUARD):
            async with open_raw_websocket(
                f"{server.ws_url}/ws", headers=[(INFO_OFFER, ASKED)]
            ) as ws:
                assert ws.response is not None
                assert ws.response.headers.get(INFO_OFFER) == ASKED
                # A request sent now is answered after the one the handshake made.
                await ws.send_text(_ping("after"))
                first = await _first_message(ws)
                second = await _first_message(ws)
    assert isinstance(first, Response) and first.id == ASKED
    assert first.payload.success and first.payload.result["id"] == "teller"
    assert isinstance(second, Response) and second.id == "after"


@pytest.mark.parametrize(
    "offer",
    [
        pytest.param("x" * 129, id="too-long"),
        pytest.param("two words", id="not-a-token"),
    ],
)
async def test_an_offer_past_its_bounds_is_not_taken_up(offer: str) -> None:
    async with open_agent_server(_agent()) as server:
        with anyio.fail_after(GUARD):
            async with open_raw_websocket(
                f"{server.ws_url}/ws", headers=[(INFO_OFFER, offer)]
            ) as ws:
                assert ws.response is not None
                assert ws.response.headers.get(INFO_OFFER) is None
                await ws.send_text(_ping("only"))
                first = await _first_message(ws)
    assert isinstance(first, Response) and first.id == "only"


async def test_an_old_client_that_offers_nothing_is_answered_only_what_it_asks() -> None:
    async with open_agent_server(_agent()) as server:
        with anyio.fail_after(GUARD):
            async with open_raw_websocket(f"{server.ws_url}/ws") as ws:
                assert ws.response is not None
                assert ws.response.headers.get(INFO_OFFER) is None
                await ws.send_text(_ping("only"))
                first = await _first_message(ws)
    assert isinstance(first, Response) and first.id == "only"


async def test_a_refused_token_gets_the_close_not_the_info() -> None:
    tokens = TokenAuthenticator({"right": "teller"})
    async with open_agent_server(_agent(), tokens=tokens) as server:
        with anyio.fail_after(GUARD):
            async with open_raw_websocket(
                f"{server.ws_url}/ws",
                headers=[(INFO_OFFER, ASKED), ("Authorization", "Bearer wrong")],
            ) as ws:
                first = await _first_message(ws)
    assert not isinstance(first, Response)
    assert first.opcode is Opcode.CLOSE and first.data[:2] == (4001).to_bytes(2, "big")


@asynccontextmanager
async def _hand_built_server(serve: Any, *, offers: tuple[str, ...]) -> AsyncIterator[str]:
    async def routes(request: Any) -> HttpResponse:
        return HttpResponse.error(404, "only /ws")

    upgrade = websocket_upgrade_handler(serve, authenticator=None, offers=offers)
    async with open_http_server(
        routes, host="127.0.0.1", port=0, upgrade_handler=upgrade
    ) as server:
        yield f"{server.ws_url}/ws"


async def test_the_client_asks_nothing_more_when_the_server_took_the_offer_up() -> None:
    seen: list[Any] = []
    done = anyio.Event()

    async def serve(stream: WebSocketStream, _: str | None) -> None:
        asked = stream.offers.get(INFO_OFFER.lower())
        assert asked is not None
        answer = Response(
            id=asked, timestamp=0, payload=ResponsePayload(success=True, result={"id": "hand"})
        )
        await stream.send(MESH_CODEC.encode(answer))
        seen.append(MESH_CODEC.decode(await stream.receive()))
        done.set()
        await anyio.sleep_forever()

    async with _hand_built_server(serve, offers=(INFO_OFFER,)) as url:
        with anyio.fail_after(GUARD):
            async with open_websocket_peer(url, agent="hand") as peer:
                assert peer.remote_info == {"id": "hand"}
                await peer.notify("after-opening")
                await done.wait()
    # The first frame the client sent is ours, not an agent/info request.
    assert isinstance(seen[0], Notification) and seen[0].payload.method == "after-opening"


async def test_a_server_that_does_not_take_the_offer_up_is_asked_after_opening() -> None:
    agent = _agent()

    async def serve(stream: WebSocketStream, _: str | None) -> None:
        assert not stream.offers
        await serve_peer(stream, agent)

    async with _hand_built_server(serve, offers=()) as url:
        with anyio.fail_after(GUARD):
            async with open_websocket_peer(url, agent="teller", connect_timeout=GUARD) as peer:
                assert peer.remote_info["id"] == "teller"
                assert await peer.call("ping", timeout=GUARD)


async def test_a_server_that_takes_the_offer_up_and_never_answers_is_bounded() -> None:
    async def serve(stream: WebSocketStream, _: str | None) -> None:
        # Took the offer up (the 101 echoed it, and went out with this first read),
        # answers nothing.
        await stream.receive()

    async with _hand_built_server(serve, offers=(INFO_OFFER,)) as url:
        with anyio.fail_after(GUARD), pytest.raises(CallTimeout) as caught:
            async with open_websocket_peer(url, agent="mute", connect_timeout=0.5):
                pytest.fail("should not open")
    assert "did not answer within 0.5 s of connecting" in str(caught.value)


async def test_a_server_that_takes_the_offer_up_and_neither_answers_nor_reads_is_bounded() -> None:
    async def serve(stream: WebSocketStream, _: str | None) -> None:
        await anyio.sleep_forever()  # its 101 waits for a frame that never comes

    async with _hand_built_server(serve, offers=(INFO_OFFER,)) as url:
        with anyio.fail_after(GUARD), pytest.raises(ConnectFailed) as caught:
            async with open_websocket_peer(url, agent="mute", connect_timeout=0.5):
                pytest.fail("should not open")
    assert "no handshake within 0.5 s" in str(caught.value)


def _upgrade_request(port: int) -> bytes:
    return (
        f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        f"Sec-WebSocket-Version: 13\r\n{INFO_OFFER}: {ASKED}\r\n\r\n"
    ).encode()


async def test_the_101_waits_for_the_answer_and_both_leave_in_one_write() -> None:
    """The client wakes once for its link: the 101 and the first frame in one segment."""
    running, answer_now, closing = anyio.Event(), anyio.Event(), anyio.Event()

    async def serve(stream: WebSocketStream, _: str | None) -> None:
        running.set()
        await answer_now.wait()
        answer = Response(
            id=ASKED, timestamp=0, payload=ResponsePayload(success=True, result={"id": "one"})
        )
        await stream.send(MESH_CODEC.encode(answer))
        await closing.wait()

    async with _hand_built_server(serve, offers=(INFO_OFFER,)) as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port)) as sock, anyio.fail_after(GUARD):
            sock.sendall(_upgrade_request(port))
            sock.setblocking(False)
            await running.wait()
            # Loopback delivers a write before the writer's send returns: a 101 written
            # when the handler started would be here now.
            with pytest.raises(BlockingIOError):
                sock.recv(65536)
            answer_now.set()
            await anyio.wait_readable(sock)
            data = sock.recv(65536)
            closing.set()
    head, _, frame = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ")
    assert ASKED.encode() in head  # the offer echoed
    assert frame[:1] == b"\x81" and b'"id":"one"' in frame  # the whole answer, same read


async def test_each_end_takes_its_connections_io_over_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's WebSocket adopts the I/O its HTTP connection read the upgrade with,
    rather than that connection giving the transport back and the WebSocket taking it
    again; the client reads the 101 through the I/O its link then keeps."""
    taken: list[object] = []

    def counted(stream: Any) -> Any:
        taken.append(stream)
        return _sockets.socket_io(stream)

    monkeypatch.setattr(_http_server, "socket_io", counted)
    monkeypatch.setattr(_websocket, "socket_io", counted)
    async with open_agent_server(_agent()) as server:
        with anyio.fail_after(GUARD):
            async with open_websocket_peer(f"{server.ws_url}/ws", agent="teller") as peer:
                assert peer.remote_info["id"] == "teller"
                assert await peer.call("ping", timeout=GUARD)
    assert len(taken) == 2  # one per end


async def test_the_server_checks_the_handshake_and_reads_frames_with_one_protocol(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A websockets protocol per link on each end (each makes a ``uuid4``, a reader and
    a parser generator): the server's checks the handshake, then parses the frames."""
    made: list[Protocol] = []
    init = Protocol.__init__

    def counted(self: Protocol, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(Protocol, "__init__", counted)
    async with open_agent_server(_agent()) as server:
        with anyio.fail_after(GUARD):
            async with open_websocket_peer(f"{server.ws_url}/ws", agent="teller") as peer:
                assert peer.remote_info["id"] == "teller"
                assert await peer.call("ping", timeout=GUARD)  # frames both ways, then
    assert sorted(protocol.side.name for protocol in made) == ["CLIENT", "SERVER"]
