"""SIGTERM drains calls over every link kind, and a call that outlasts the drain gets a 503."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import httpx
import pytest
import sniffio

from mesh.testing import EchoServer, spawn_daemon
from tests.faults._helpers import HOLDING_AGENT, stop_and_kill, wait_holding

pytestmark = pytest.mark.anyio

TOKEN = "hold-token-for-tests"


async def test_sigterm_answers_dial_in_calls_and_cuts_the_late_one_with_a_503(
    tmp_path: Path,
) -> None:
    (tmp_path / "holder.toml").write_text(
        'id = "holder"\n[transport]\ntype = "dial-in"\ntoken_env = "HOLD_TOKEN"\n'
    )
    env = {"HOLD_TOKEN": TOKEN}
    async with spawn_daemon(tmp_path, env=env, extra_args=["--drain-timeout", "2"]) as daemon:
        command = [sys.executable, "-m", HOLDING_AGENT, "--connect", daemon.ws]
        command += ["--id", "holder", "--token-env", "HOLD_TOKEN"]
        command += ["--backend", sniffio.current_async_library()]
        agent = await anyio.open_process(command, env={**os.environ, **env}, stderr=None)
        try:
            holder = EchoServer("", "", agent, None)  # for wait_holding: its stdout
            await daemon.wait_online("holder")
            replies: dict[float, httpx.Response] = {}

            async def hold(seconds: float) -> None:
                body = {
                    "agent": "holder",
                    "method": "tools/call",
                    "params": {"name": "hold", "arguments": {"seconds": seconds}},
                    "timeout": 120,
                }
                async with httpx.AsyncClient(base_url=daemon.http, timeout=60) as http:
                    replies[seconds] = await http.post("/rpc", json=body)

            async with anyio.create_task_group() as tg:
                for seconds in (0.5, 0.75, 600.0):
                    tg.start_soon(hold, seconds)
                with anyio.fail_after(20):
                    await wait_holding(holder, 3)  # all three are in the agent's hands
                daemon.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(20):
                code = await daemon.process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                stop_and_kill(agent.pid)
                await agent.wait()
                await agent.aclose()
    assert code == 0
    assert replies[0.5].json() == {"result": {"slept": 0.5}}, replies[0.5].text
    assert replies[0.75].json() == {"result": {"slept": 0.75}}, replies[0.75].text
    late = replies[600.0]
    assert late.status_code == 503, late.text
    assert "shut down before this call finished" in late.json()["error"]["message"]
