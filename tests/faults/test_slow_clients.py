"""Row 5: slow, idle and half-open clients do not pin the server.

Against ``mesh.open_agent_server``: 50 connections that send half a request, 50 that
send nothing, 50 that send a request and never read the answer. While they hang on
(under 30 s timeouts), a normal client's calls are answered; and under 0.3 s timeouts
the server closes every one of them. The closes are seen by the kernel
(``POLLRDHUP``), so even a client that never reads knows.

Then the clients that defeat a timeout on one step only: half a request *head* under a
long keep-alive timeout (408 after the request timeout all the same), and clients that
never read large answers, over HTTP and WebSocket, until the server's writes block.

No bound here is a measured latency: each is a hang guard far from the timeouts the
test is about, so a loaded machine cannot trip it and a wrong server cannot pass.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import anyio
import pytest

from mesh import SessionConfig, open_agent_server, open_http_peer, open_websocket_peer
from mesh.agents.echo import agent as echo_agent
from tests.faults._helpers import ping_frame, wait_closed_by_peer
from transports import HttpServer, HttpServerConfig, WebSocketConfig, open_websocket

pytestmark = pytest.mark.anyio

TIMEOUT = 0.3
QUICK = HttpServerConfig(request_timeout=TIMEOUT, keepalive_timeout=TIMEOUT)
#: Timeouts that cannot fire during a test: a server that waited for them would hang.
PATIENT = HttpServerConfig(request_timeout=30, keepalive_timeout=30)
EACH = 50
#: A hang guard: far above the 0.3 s timeouts (a loaded machine's delays fit many
#: times over), far below the 30 s ones (so what it bounds cannot be their doing).
WITHIN = 10.0

HALF_HEAD = b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"
HALF_BODY = b'POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"type":'
PING = ping_frame("unread")
WHOLE = b"POST /rpc HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(PING), PING)


@dataclass(frozen=True, slots=True)
class Opened:
    sock: socket.socket
    connected_at: float  # time.monotonic(), the clock wait_closed_by_peer reports on


@contextmanager
def _connections(port: int, first_bytes: bytes, count: int) -> Iterator[list[Opened]]:
    """``count`` connections that each send ``first_bytes`` and then nothing.

    Plain blocking sockets: a loopback connect completes in the kernel's backlog in
    microseconds, without the (in-process) server's event loop, so 150 open at once.
    """
    with ExitStack() as stack:
        opened = []
        for _ in range(count):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
            connected_at = time.monotonic()
            sock.sendall(first_bytes)
            opened.append(Opened(sock, connected_at))
        yield opened


@contextmanager
def _bad_clients(port: int) -> Iterator[dict[str, list[Opened]]]:
    """The 150 connections, by kind: half heads, half bodies, idle, never reading."""
    with (
        _connections(port, HALF_HEAD, EACH // 2) as half_heads,
        _connections(port, HALF_BODY, EACH // 2) as half_bodies,
        _connections(port, b"", EACH) as idle,
        _connections(port, WHOLE, EACH) as unread,
    ):
        yield {
            "half head": half_heads,
            "half body": half_bodies,
            "idle": idle,
            "never read": unread,
        }


def _closed_by_peer_now(sockets: list[socket.socket]) -> list[socket.socket]:
    """The sockets whose peer has closed them, without waiting."""
    poller = select.poll()
    for sock in sockets:
        poller.register(sock, select.POLLRDHUP)
    closed = {fd for fd, _ in poller.poll(0)}
    return [sock for sock in sockets if sock.fileno() in closed]


async def _normal_calls(server: HttpServer) -> None:
    """Calls over HTTP and WebSocket, made while the bad connections hang on."""
    async with open_http_peer(server.url, agent="echo") as over_http:
        for _ in range(10):
            await over_http.ping()
    async with open_websocket_peer(server.ws_url + "/ws", agent="echo") as over_ws:
        for _ in range(10):
            await over_ws.ping()


def _received(sock: socket.socket) -> bytes:
    return sock.recv(4096, socket.MSG_DONTWAIT)  # the peer has closed: all of it is here


async def test_slow_idle_and_unread_connections_do_not_pin_the_server() -> None:
    async with open_agent_server(echo_agent, http_config=PATIENT) as server:
        with _bad_clients(server.port) as groups:
            everyone = [opened.sock for group in groups.values() for opened in group]
            # The bad clients hold on for 30 s: answered within WITHIN, the calls did
            # not wait for them.
            with anyio.fail_after(WITHIN):
                await _normal_calls(server)
            assert _closed_by_peer_now(everyone) == [], "the calls ran while all were open"


async def test_slow_idle_and_unread_connections_are_closed_by_the_timeouts() -> None:
    closed_at: dict[int, float] = {}
    async with open_agent_server(echo_agent, http_config=QUICK) as server:
        with _bad_clients(server.port) as groups:
            everyone = [opened.sock for group in groups.values() for opened in group]
            with anyio.fail_after(WITHIN):
                closed_at.update(await wait_closed_by_peer(everyone))
            for name, group in groups.items():
                for opened in group:
                    lived = closed_at[opened.sock.fileno()] - opened.connected_at
                    # Closed by its timeout, not at once. A lower bound only: the server's
                    # timer starts after we connected, and timers do not fire early.
                    assert lived > TIMEOUT - 0.1, (name, lived)
            for opened in groups["half head"] + groups["half body"]:
                assert _received(opened.sock).startswith(b"HTTP/1.1 408 ")
            for opened in groups["never read"]:
                assert _received(opened.sock).startswith(b"HTTP/1.1 200 ")


async def test_half_a_request_head_gets_408_within_the_request_timeout() -> None:
    """The head counts as part of the request: a long keep-alive timeout does not cover it."""
    config = HttpServerConfig(request_timeout=TIMEOUT, keepalive_timeout=30)
    async with (
        open_agent_server(echo_agent, http_config=config) as server,
        await anyio.connect_tcp("127.0.0.1", server.port) as stream,
    ):
        await stream.send(HALF_HEAD)
        with anyio.fail_after(WITHIN):  # and before the 30 s keep-alive
            reply = await stream.receive()
    assert reply.startswith(b"HTTP/1.1 408 ")


def _blob_request(n: int) -> bytes:
    """A tools/call whose answer (~900 KB) overflows the socket buffers after a few."""
    arguments = {"name": "blob", "arguments": {"size": 900_000}}
    return json.dumps(
        {
            "type": "request",
            "id": f"blob{n}",
            "timestamp": 1,
            "payload": {"method": "tools/call", "params": arguments},
        }
    ).encode()


async def _wait_for_no_connections(server: HttpServer, within: float) -> bool:
    # The server's own count: the client cannot see a close queued behind data it never reads.
    with anyio.move_on_after(within):
        await server.wait_connections(0)
    return server.connections == 0


async def test_an_http_client_that_never_reads_large_answers_is_cut_off() -> None:
    """Writing the answers is bounded too: a client that never reads cannot hold them."""
    async with (
        open_agent_server(echo_agent, http_config=QUICK) as server,
        await anyio.connect_tcp("127.0.0.1", server.port) as stream,
    ):
        for n in range(20):
            body = _blob_request(n)
            await stream.send(
                b"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
        assert await _wait_for_no_connections(server, WITHIN)


async def test_a_websocket_client_that_never_reads_is_cut_off() -> None:
    """The session's TTL fires; closing must not then wait for ever on a full socket."""
    quick_ws = WebSocketConfig(ping_interval=0.2, ping_timeout=0.2, close_timeout=0.2)
    async with (
        open_agent_server(
            echo_agent, config=SessionConfig(heartbeat_interval=0.1), websocket_config=quick_ws
        ) as server,
        open_websocket(server.ws_url + "/ws", config=WebSocketConfig(ping_interval=None)) as ws,
    ):
        await ws.send_many([_blob_request(n) for n in range(20)])
        assert await _wait_for_no_connections(server, WITHIN)
