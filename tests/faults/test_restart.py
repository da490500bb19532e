"""Row 3: the agent's server is killed and restarted on the same port (the protocol's restart test).

A reconnecting client carries on by itself: the next call succeeds without the caller
doing anything. A client whose server never comes back gives up after its attempts
and says so to every caller.
"""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from mesh import ConnectionEvent, ConnectionLost, ReconnectPolicy, open_reconnecting_peer
from mesh.testing import EchoServer, spawn_echo_server
from transports import Connector, open_http_client, open_websocket

pytestmark = pytest.mark.anyio

FAST = ReconnectPolicy(base=0.05, cap=0.2)
#: Starting a second agent process and redialling: seconds on a loaded machine, not more.
RESTART_TIMEOUT = 20.0


def _connector(transport: str, server: EchoServer) -> Connector:
    if transport == "websocket":
        return lambda: open_websocket(server.ws)
    return lambda: open_http_client(server.http)


def _port(server: EchoServer) -> int:
    return int(server.http.rsplit(":", 1)[1])


class Recorder:
    """``on_event`` for the reconnecting peer: the kinds seen, and an event per kind."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.errors: dict[str, BaseException | None] = {}
        self._seen: dict[str, anyio.Event] = {}

    def __call__(self, event: ConnectionEvent) -> None:
        self.kinds.append(event.kind)
        self.errors[event.kind] = event.error
        self.seen(event.kind).set()

    def seen(self, kind: str) -> anyio.Event:
        return self._seen.setdefault(kind, anyio.Event())


async def _kill(server: EchoServer) -> None:
    os.kill(server.process.pid, signal.SIGKILL)
    await server.process.wait()


@pytest.mark.parametrize("transport", ["websocket", "http"])
async def test_the_next_call_after_a_restart_on_the_same_port_succeeds(transport: str) -> None:
    events = Recorder()
    with anyio.fail_after(RESTART_TIMEOUT):
        async with (
            spawn_echo_server() as first,
            open_reconnecting_peer(
                _connector(transport, first), agent="echo", policy=FAST, on_event=events
            ) as echo,
        ):
            assert await echo.call_tool("echo", {"message": "one"}) == {"message": "one"}
            await _kill(first)
            if transport == "websocket":  # a link to lose; HTTP has none between calls
                await events.seen("disconnected").wait()
                # Read now: stopping the second server later (SIGTERM, a clean 1000) is
                # another disconnect.
                lost = events.errors["disconnected"]
            restart = ["--http", f"127.0.0.1:{_port(first)}"]
            async with spawn_echo_server(extra_args=restart) as second:
                assert second.http == first.http
                result = await echo.call_tool("echo", {"message": "two"})
                assert result == {"message": "two"}
                assert echo.connected and echo.state == "connected"
                kinds = list(events.kinds)
    if transport == "websocket":
        assert kinds[:3] == ["connected", "disconnected", "reconnecting"]
        assert kinds[-1] == "connected" and set(kinds[3:-1]) == {"reconnecting"}
        # The TCP connection just ended: no close frame, so websockets' 1006 (abnormal).
        assert isinstance(lost, ConnectionLost) and lost.close_code in (None, 1006)
    else:
        # Each POST opens or reuses a connection: the pool drops the dead one, and the
        # call reaches the new server without the session noticing the restart at all.
        assert kinds == ["connected"]


@pytest.mark.parametrize("transport", ["websocket", "http"])
async def test_a_server_that_never_returns_is_given_up_on_and_callers_are_told(
    transport: str,
) -> None:
    events = Recorder()
    policy = ReconnectPolicy(base=0.05, cap=0.2, max_attempts=2)
    with anyio.fail_after(RESTART_TIMEOUT):
        async with (
            spawn_echo_server() as server,
            open_reconnecting_peer(
                _connector(transport, server), agent="echo", policy=policy, on_event=events
            ) as echo,
        ):
            assert await echo.call_tool("echo", {"message": "one"}) == {"message": "one"}
            await _kill(server)
            if transport == "websocket":
                await events.seen("disconnected").wait()
            else:
                # Over HTTP the loss shows when a POST fails: that call fails with it.
                with pytest.raises(ConnectionLost, match="cannot reach"):
                    await echo.call_tool("echo", {"message": "into the void"})
            # This caller waits for a connection that never comes, and is told why.
            with pytest.raises(ConnectionLost) as gave_up:
                await echo.call_tool("echo", {"message": "anyone?"})
            assert events.seen("gave_up").is_set()
            assert echo.state == "gave_up" and echo.closed
            with pytest.raises(ConnectionLost, match="gave up"):  # and so is every later one
                await echo.call_tool("echo", {"message": "still nobody?"})
    message = str(gave_up.value)
    assert "gave up reconnecting to agent 'echo' after 2 attempts" in message, message
    assert "cannot connect" in message or "cannot reach" in message, message
    assert isinstance(gave_up.value.__cause__, Exception)
    assert events.kinds[-3:] == ["reconnecting", "gave_up", "closed"]
