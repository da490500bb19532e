"""An agent process drains on SIGTERM: calls in flight are answered, then it exits 0."""

from __future__ import annotations

import os
import signal
from typing import Any

import anyio
import httpx
import pytest

from mesh import Peer
from mesh.testing import open_echo_agent, spawn_dial_in_echo, spawn_echo_server
from tests.faults._helpers import HOLDING_AGENT, wait_holding
from transports import StdioProcessStream

pytestmark = pytest.mark.anyio

SLEEP = {"name": "sleep", "arguments": {"seconds": 0.6, "progress_every": 0.1}}


async def call_then_sigterm(peer: Peer, pid: int) -> Any:
    """A call in the agent's hands (its first progress says so), then SIGTERM; its result."""
    started = anyio.Event()
    result: Any = None

    async def call() -> None:
        nonlocal result
        result = await peer.call("tools/call", SLEEP, on_progress=lambda _: started.set())

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(20):
            await started.wait()
        os.kill(pid, signal.SIGTERM)
    return result


async def test_over_stdio() -> None:
    async with open_echo_agent() as peer:
        stream = peer.stream
        assert isinstance(stream, StdioProcessStream)
        assert await call_then_sigterm(peer, stream.pid) == {"slept": 0.6}
        with anyio.fail_after(10):
            await peer.wait_closed()  # the agent ended the link: it exited
        assert peer.close_error is not None and peer.close_error.exit_code == 0


async def test_dialled_in() -> None:
    async with spawn_dial_in_echo() as echo:
        assert await call_then_sigterm(echo.peer, echo.process.pid) == {"slept": 0.6}
        with anyio.fail_after(10):
            assert await echo.process.wait() == 0


async def test_over_http() -> None:
    async with spawn_echo_server(module=HOLDING_AGENT) as server:
        body = b'{"type":"request","id":"h","timestamp":1,"payload":{"method":"tools/call",'
        body += b'"params":{"name":"hold","arguments":{"seconds":0.6}}}}'
        reply: list[httpx.Response] = []

        async def post() -> None:
            async with httpx.AsyncClient(timeout=20) as http:
                reply.append(await http.post(server.http + "/rpc", content=body))

        async with anyio.create_task_group() as tg:
            tg.start_soon(post)
            with anyio.fail_after(20):
                await wait_holding(server, 1)
            server.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await server.process.wait() == 0
    assert reply[0].json()["payload"] == {"success": True, "result": {"slept": 0.6}}
