"""Reconnect against the live echo agent as a real child process: kill it, and carry on."""

from __future__ import annotations

import os
import signal

import anyio
import pytest
import sniffio

from mesh import ConnectionEvent, ConnectionLost, Peer, ReconnectPolicy, open_reconnecting_peer
from mesh.testing import echo_agent_command
from transports import StdioProcessStream, open_stdio_process

pytestmark = pytest.mark.anyio


async def test_the_agent_is_killed_mid_session_and_the_next_call_succeeds() -> None:
    command, args = echo_agent_command(backend=sniffio.current_async_library())
    pids: list[int] = []
    events: list[ConnectionEvent] = []
    dropped = anyio.Event()

    async def on_connect(peer: Peer) -> None:
        assert isinstance(peer.stream, StdioProcessStream)
        pids.append(peer.stream.pid)

    def on_event(event: ConnectionEvent) -> None:
        events.append(event)
        if event.kind == "disconnected":
            dropped.set()

    with anyio.fail_after(30):
        async with open_reconnecting_peer(
            lambda: open_stdio_process(command, args),
            agent="echo",
            policy=ReconnectPolicy(base=0.05, cap=0.5),
            on_connect=on_connect,
            on_event=on_event,
        ) as echo:
            assert await echo.call_tool("echo", {"message": "one"}) == {"message": "one"}
            os.kill(pids[0], signal.SIGKILL)
            await dropped.wait()
            assert await echo.call_tool("echo", {"message": "two"}) == {"message": "two"}
    assert len(pids) == 2 and pids[0] != pids[1]
    [lost] = [event.error for event in events if event.kind == "disconnected"]
    assert isinstance(lost, ConnectionLost) and lost.exit_code == -signal.SIGKILL
