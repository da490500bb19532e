"""No one client locks the others out of a real ``mesh serve``: pools, deadlines, per-token caps.

The pools are made small through the daemon's own settings, so each test opens a
few dozen sockets, not thousands.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import anyio.abc
import h11
import httpx
import pytest

from mesh.testing import Daemon, spawn_daemon
from transports import CloseCode, TransportClosed, WebSocketStream

pytestmark = pytest.mark.anyio

#: Each wait on the daemon is bounded by this (processes on a loaded machine).
GUARD = 20.0

SMALL_POOLS = """\
max_connections = 4
admin_connections = 1
max_unauthenticated_connections = 4
max_streams_per_identity = 2
first_byte_timeout = 2
"""


def _port(daemon: Daemon) -> int:
    return int(daemon.http.rsplit(":", 1)[1])


async def _token(daemon: Daemon, role: str, name: str) -> str:
    async with daemon.client() as admin:
        created = await admin.post("/tokens", json={"role": role, "name": name})
    assert created.status_code == 201, created.text
    token: str = created.json()["token"]
    return token


async def _spawn(tmp_path: Path, stack: AsyncExitStack, more: str = "") -> Daemon:
    config = tmp_path / "mesh.toml"
    config.write_text(SMALL_POOLS + more)
    (tmp_path / "manifests").mkdir()
    return await stack.enter_async_context(
        spawn_daemon(tmp_path / "manifests", extra_args=["--config", str(config)])
    )


async def _get(daemon: Daemon, token: str | None, path: str = "/agents") -> httpx.Response:
    """One request on a connection of its own."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=daemon.http, headers=headers, timeout=GUARD) as http:
        return await http.get(path)


async def _closed_by_server(stream: anyio.abc.SocketStream) -> bool:
    with anyio.move_on_after(GUARD):
        try:
            return await stream.receive() == b""
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return True
    return False


async def test_silent_sockets_from_strangers_do_not_lock_out_token_holders(
    tmp_path: Path,
) -> None:
    async with AsyncExitStack() as stack:
        daemon = await _spawn(tmp_path, stack)
        observer = await _token(daemon, "observer", "eyes")
        silent = [
            await stack.enter_async_context(await anyio.connect_tcp("127.0.0.1", _port(daemon)))
            for _ in range(24)
        ]
        # Six times the strangers' pool, and yet: a token holder and a stranger's /health.
        assert (await _get(daemon, observer)).status_code == 200
        assert (await _get(daemon, None, "/health")).status_code == 200
        async with daemon.client() as admin:
            assert (await admin.get("/agents")).status_code == 200
        # The oldest silent ones made room: closed by the daemon.
        assert await _closed_by_server(silent[0])


async def test_a_silent_connection_is_closed_after_the_first_byte_deadline(
    tmp_path: Path,
) -> None:
    async with AsyncExitStack() as stack:
        daemon = await _spawn(tmp_path, stack)
        async with await anyio.connect_tcp("127.0.0.1", _port(daemon)) as silent:
            assert await _closed_by_server(silent)  # first_byte_timeout = 2 s, not 60


async def test_a_head_that_dribbles_in_gets_408_at_the_head_deadline(tmp_path: Path) -> None:
    async with AsyncExitStack() as stack:
        daemon = await _spawn(tmp_path, stack, "head_timeout = 1\n")
        async with await anyio.connect_tcp("127.0.0.1", _port(daemon)) as slow:
            await slow.send(b"GET /health HTTP/1.1\r\nhost: m\r\n")  # and never the blank line
            with anyio.fail_after(GUARD):
                reply = await slow.receive()
        assert reply.startswith(b"HTTP/1.1 408 Request Timeout") and b"head not complete" in reply


async def test_one_token_cannot_hold_every_stream_and_an_admin_always_gets_in(
    tmp_path: Path,
) -> None:
    async with AsyncExitStack() as stack:
        daemon = await _spawn(tmp_path, stack)
        observer = await _token(daemon, "observer", "hog")
        client = await _token(daemon, "client", "fair")
        late = await _token(daemon, "client", "late")
        hogs = [await _watch(stack, daemon, observer) for _ in range(2)]
        # The hog's third stream is closed with 4029, naming the bound.
        async with daemon.open_events("/agents/events", token=observer) as third:
            await _wait_closed(third, "max_streams_per_identity")
        fair = [await _watch(stack, daemon, client) for _ in range(2)]
        # Four streams fill max_connections = 4, yet a third token's request is served: the
        # newest stream of the first token holding more than it would is closed to make room.
        assert (await _get(daemon, late)).status_code == 200
        await _wait_closed(hogs[-1], "max_connections")
        await _watch(stack, daemon, late)  # a free slot: nobody is closed
        # Full again, and no token holds more than the hog would with one more: 503.
        refused = await _get(daemon, observer)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["message"].endswith("(max_connections)")
        assert refused.json()["error"]["limit"] == "max_connections"
        await _still_open(daemon, hogs[0], *fair)
        # ...but an admin has slots of its own (admin_connections = 1).
        async with daemon.client() as admin:
            assert (await admin.get("/agents")).status_code == 200


async def test_observers_filling_the_pool_with_watchers_leave_others_served(
    tmp_path: Path,
) -> None:
    # Per-token caps alone add up to more than the pool (16 observers x 64 streams > 1000 by
    # default): here 3 observers x 4 streams > 8 connections.
    async with AsyncExitStack() as stack:
        config = tmp_path / "mesh.toml"
        config.write_text(
            "max_connections = 8\nadmin_connections = 1\nmax_streams_per_identity = 4\n"
        )
        (tmp_path / "manifests").mkdir()
        daemon = await stack.enter_async_context(
            spawn_daemon(tmp_path / "manifests", extra_args=["--config", str(config)])
        )
        eyes = [await _token(daemon, "observer", f"eyes-{n}") for n in range(3)]
        client = await _token(daemon, "client", "fair")
        first = [await _watch(stack, daemon, eyes[0]) for _ in range(4)]
        second = [await _watch(stack, daemon, eyes[1]) for _ in range(4)]
        # The pool is full of watchers; a third observer still gets one, in place of the
        # newest of the largest holder's.
        await _watch(stack, daemon, eyes[2])
        await _wait_closed(first[-1], "max_connections")
        # Another client is served, and so is the admin.
        assert (await _get(daemon, client)).status_code == 200
        await _wait_closed(second[-1], "max_connections")
        async with daemon.client() as admin:
            assert (await admin.get("/agents")).status_code == 200
        await _still_open(daemon, *first[:-1], *second[:-1])


async def _watch(stack: AsyncExitStack, daemon: Daemon, token: str) -> WebSocketStream:
    """A watcher of ``/agents/events`` that has had its snapshot."""
    stream = await stack.enter_async_context(daemon.open_events("/agents/events", token=token))
    with anyio.fail_after(GUARD):
        assert json.loads(await stream.receive())["type"] == "snapshot"
    return stream


async def _wait_closed(stream: WebSocketStream, setting: str) -> None:
    """Until the daemon closes ``stream`` with 4029 naming ``setting``."""
    with anyio.fail_after(GUARD), pytest.raises(TransportClosed) as closed:
        await stream.receive()
    assert closed.value.close_code == CloseCode.TOO_MANY, closed.value
    assert f"({setting})" in closed.value.reason, closed.value.reason


async def _still_open(daemon: Daemon, *streams: WebSocketStream) -> None:
    """Each of ``streams`` still gets the events: an agent registered now reaches them all."""
    async with daemon.client() as admin:
        registered = await admin.post("/agents/register", json={"id": "probe"})
        assert registered.status_code == 201, registered.text
        assert (await admin.delete("/agents/probe")).status_code == 204
    for stream in streams:
        with anyio.fail_after(GUARD):
            event = json.loads(await stream.receive())
        assert event["agent"]["id"] == "probe", event


async def _keep_alive_get(daemon: Daemon, token: str) -> anyio.abc.SocketStream:
    """A connection that made one request and was answered 200, left open (keep-alive)."""
    stream = await anyio.connect_tcp("127.0.0.1", _port(daemon))
    head = f"GET /agents HTTP/1.1\r\nhost: m\r\nauthorization: Bearer {token}\r\n\r\n"
    await stream.send(head.encode())
    parser = h11.Connection(h11.CLIENT)
    parser.send(h11.Request(method="GET", target="/agents", headers=[("host", "m")]))
    parser.send(h11.EndOfMessage())
    with anyio.fail_after(GUARD):
        while not isinstance(event := parser.next_event(), h11.EndOfMessage):
            if event is h11.NEED_DATA:
                parser.receive_data(await stream.receive())
            elif isinstance(event, h11.Response):
                assert event.status_code == 200
    return stream


async def test_one_token_cannot_take_every_connection_and_makes_room_with_its_own(
    tmp_path: Path,
) -> None:
    async with AsyncExitStack() as stack:
        config = tmp_path / "mesh.toml"
        config.write_text("max_connections_per_identity = 3\nmax_streams_per_identity = 3\n")
        (tmp_path / "manifests").mkdir()
        args = ["--config", str(config)]
        daemon = await stack.enter_async_context(
            spawn_daemon(tmp_path / "manifests", extra_args=args)
        )
        hog = await _token(daemon, "client", "hog")
        fair = await _token(daemon, "client", "fair")

        async def watch(token: str) -> None:
            stream = await stack.enter_async_context(
                daemon.open_events("/agents/events", token=token)
            )
            with anyio.fail_after(GUARD):
                assert json.loads(await stream.receive())["type"] == "snapshot"

        # Two streams (never idle) and an idle keep-alive: the hog holds three connections.
        await watch(hog)
        await watch(hog)
        idle = await stack.enter_async_context(await _keep_alive_get(daemon, hog))
        # A fourth is served: the hog's own idle keep-alive was closed to make room...
        newer = await stack.enter_async_context(await _keep_alive_get(daemon, hog))
        assert await _closed_by_server(idle)
        # ...and so is a third stream, in place of the newer keep-alive.
        await watch(hog)
        assert await _closed_by_server(newer)
        # Now every one of the hog's connections is a stream: it is refused, naming the bound...
        refused = await _get(daemon, hog)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["message"].endswith("(max_connections_per_identity)")
        # ...while another token and an admin are served.
        assert (await _get(daemon, fair)).status_code == 200
        await watch(fair)
        async with daemon.client() as admin:
            assert (await admin.get("/agents")).status_code == 200


HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


async def _mcp(daemon: Daemon, token: str, body: object, session: str = "") -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if session:
        headers["Mcp-Session-Id"] = session
    async with httpx.AsyncClient(base_url=daemon.http, headers=headers, timeout=GUARD) as http:
        return await http.post("/mcp", json=body)


async def test_mcp_sessions_are_bounded_per_token_and_no_one_evicts_anothers(
    tmp_path: Path,
) -> None:
    config = tmp_path / "mesh.toml"
    config.write_text("max_mcp_sessions = 3\nmax_mcp_sessions_per_identity = 2\n")
    (tmp_path / "manifests").mkdir()
    args = ["--config", str(config)]
    async with spawn_daemon(tmp_path / "manifests", extra_args=args) as daemon:
        ann, bob, cat = [await _token(daemon, "client", name) for name in ("ann", "bob", "cat")]
        opened = [await _mcp(daemon, ann, INITIALIZE) for _ in range(3)]
        first, *kept = [reply.headers["mcp-session-id"] for reply in opened]
        # Ann's third session ended her own least recently used one, no one else's.
        assert (await _mcp(daemon, ann, PING, first)).status_code == 404
        bobs = (await _mcp(daemon, bob, INITIALIZE)).headers["mcp-session-id"]
        # Three sessions are open: Cat is refused plainly, and nobody's session is gone.
        refused = await _mcp(daemon, cat, INITIALIZE)
        assert refused.status_code == 503
        message = refused.json()["error"]["message"]
        assert "too many MCP sessions" in message and "max_mcp_sessions" in message
        for token, session in ((ann, kept[0]), (ann, kept[1]), (bob, bobs)):
            assert (await _mcp(daemon, token, PING, session)).status_code == 200
