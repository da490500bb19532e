"""Rows 1 and 2: the agent is SIGKILLed, or SIGSTOPped, with calls in flight.

Killed: every pending call fails at once with the reason (the exit status over
stdio, the lost connection over HTTP and WebSocket, in both dial directions).
Stopped: the process is alive but silent, so only the caller's heartbeat TTL can
notice; every pending call fails with that reason.

"At once" is not measured: the calls sleep for 60 s under a 30 s deadline, so anything
but the death (or the TTL) that ended them would take 30 s; the guard is well below.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import pytest
from sniffio import current_async_library

from mesh import (
    ConnectionLost,
    Peer,
    SessionConfig,
    open_http_peer,
    open_peer,
    open_websocket_peer,
)
from mesh.testing import (
    SPAWN_TIMEOUT,
    echo_agent_command,
    spawn_dial_in_echo,
    spawn_echo_server,
)
from tests.faults._helpers import ping_frame, spawn_holding_server, stop_and_kill, wait_holding
from transports import open_stdio_process

pytestmark = pytest.mark.anyio

PENDING = 20
#: "every pending call fails at once" (protocol.md): a hang guard, far below the calls'
#: 30 s deadline and the default heartbeat TTL, so only the death can have failed them.
FAIL_WITHIN = 10.0
SLEEP_FOREVER = {"seconds": 60}


@dataclass
class Victim:
    """A connected agent, its process id, and how to know it holds every pending call."""

    peer: Peer
    pid: int
    holds_calls: Callable[[], Awaitable[Any]]
    tool: str = "sleep"  # the tool that keeps a call pending


async def _calls_queued_then_ping(peer: Peer) -> None:
    # One link, frames in order: once the ping that was queued after the pending
    # calls is answered, the agent has read every one of them and started its handler.
    await anyio.wait_all_tasks_blocked()
    await peer.ping()


@asynccontextmanager
async def _stdio(config: SessionConfig | None = None) -> AsyncIterator[Victim]:
    command, args = echo_agent_command(backend=current_async_library())
    async with open_stdio_process(command, args) as stream:
        # Python takes a while to start, silently: a short heartbeat TTL must not run yet.
        await stream.send(ping_frame("up?"))
        with anyio.fail_after(SPAWN_TIMEOUT):
            await stream.receive()
        async with open_peer(stream, config=config, agent="echo") as peer:
            await peer.ping()
            yield Victim(peer, stream.pid, lambda: _calls_queued_then_ping(peer))


@asynccontextmanager
async def _http(config: SessionConfig | None = None) -> AsyncIterator[Victim]:
    # POSTs travel on separate connections in no order: the agent says when it holds each.
    async with (
        spawn_holding_server() as server,
        open_http_peer(server.http, agent="echo", config=config) as peer,
    ):
        holding = partial(wait_holding, server, PENDING)
        yield Victim(peer, server.process.pid, holding, tool="hold")


@asynccontextmanager
async def _websocket(config: SessionConfig | None = None) -> AsyncIterator[Victim]:
    async with (
        spawn_echo_server() as server,
        open_websocket_peer(server.ws, agent="echo", config=config) as peer,
    ):
        yield Victim(peer, server.process.pid, lambda: _calls_queued_then_ping(peer))


@asynccontextmanager
async def _websocket_dial_in(config: SessionConfig | None = None) -> AsyncIterator[Victim]:
    async with spawn_dial_in_echo(config=config) as echo:
        peer = echo.peer
        yield Victim(peer, echo.process.pid, lambda: _calls_queued_then_ping(peer))


VICTIMS = {
    "stdio": _stdio,
    "http": _http,
    "websocket": _websocket,
    "websocket-dial-in": _websocket_dial_in,
}


async def _signal_mid_call(
    victim: Victim,
    signum: signal.Signals,
    arguments: dict[str, Any] = SLEEP_FOREVER,
    *,
    on_progress: Callable[[Any], None] | None = None,
    before_signal: Callable[[], Awaitable[Any]] | None = None,
) -> list[ConnectionLost]:
    """Park ``PENDING`` calls on the agent, send it ``signum``: their errors."""
    errors: list[ConnectionLost] = []
    all_failed = anyio.Event()

    async def pending() -> None:
        try:
            await victim.peer.call_tool(victim.tool, arguments, on_progress=on_progress)
        except ConnectionLost as exc:  # anything else fails the test
            errors.append(exc)
            if len(errors) == PENDING:
                all_failed.set()

    async with anyio.create_task_group() as tg:
        for _ in range(PENDING):
            tg.start_soon(pending)
        with anyio.fail_after(10):
            await victim.holds_calls()
            if before_signal is not None:
                await before_signal()
        assert victim.peer.statistics().calls_in_flight == PENDING
        os.kill(victim.pid, signum)
        with anyio.fail_after(FAIL_WITHIN):
            await all_failed.wait()
    return errors


@pytest.mark.parametrize("transport", sorted(VICTIMS))
async def test_sigkill_fails_every_pending_call_at_once_saying_why(transport: str) -> None:
    async with VICTIMS[transport]() as victim:
        errors = await _signal_mid_call(victim, signal.SIGKILL)
        with pytest.raises(ConnectionLost):  # and later calls fail at once, with the same cause
            await victim.peer.call_tool("echo", {"message": "anyone?"})
    assert len(errors) == PENDING
    for exc in errors:
        text = str(exc)
        assert exc.method == f"tools/call {victim.tool}" and "agent 'echo'" in text, text
        if transport == "stdio":
            assert exc.exit_code == -signal.SIGKILL and "killed by SIGKILL" in text, text
        elif transport == "http":
            # The connection died under the POST: the message says so and where.
            assert "http://127.0.0.1:" in text and "over http" in text, text
            assert re.search(r"RemoteProtocolError|ReadError|disconnected", text), text
        else:
            assert "over websocket" in text, text
            assert re.search(r"connection (lost|closed)|code 1006", text), text


#: The caller's heartbeat: the TTL is three intervals, 0.6 s.
HEARTBEAT = SessionConfig(heartbeat_interval=0.2)
TTL = 0.6
#: Progress every 0.1 s: the agent's own word that it was alive past the TTL.
WITH_PROGRESS = {"seconds": 60, "progress_every": 0.1}


@pytest.mark.parametrize("transport", ["stdio", "websocket"])
async def test_sigstop_fails_pending_calls_with_the_heartbeat_ttl(transport: str) -> None:
    alive_past_ttl = anyio.Event()

    def progress(params: Any) -> None:
        if params["progress"] > TTL + 0.1:
            alive_past_ttl.set()

    async with VICTIMS[transport](HEARTBEAT) as victim:
        try:
            # The control: while the agent runs, the link stays up past the TTL.
            errors = await _signal_mid_call(
                victim,
                signal.SIGSTOP,
                WITH_PROGRESS,
                on_progress=progress,
                before_signal=alive_past_ttl.wait,
            )
        finally:
            stop_and_kill(victim.pid)
    assert len(errors) == PENDING
    # Not at once (the process lives, its pipe or socket stays open): only silence tells,
    # and the session measured at least a TTL of it.
    for exc in errors:
        silence = re.search(r"peer sent nothing for ([\d.]+) s \(heartbeat TTL 0\.6 s\)", str(exc))
        assert silence is not None and float(silence.group(1)) >= TTL, str(exc)
        assert exc.exit_code is None


async def test_a_healthy_idle_agent_outlives_a_callers_short_heartbeat_ttl() -> None:
    """The agent beats every 10 s; a caller whose TTL is 0.6 s must not call it dead for that.

    (It did: the TTL was three of the caller's intervals, whatever the agent's. Now a
    caller that has heard nothing for an interval asks the agent to answer.)
    """
    async with _stdio(HEARTBEAT) as victim:
        with anyio.move_on_after(2 * TTL):
            await victim.peer.wait_closed()
        assert not victim.peer.closed, victim.peer.close_error
