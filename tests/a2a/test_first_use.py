"""A daemon loads its A2A face on the first ``/a2a`` request: what a client sees is unchanged.

``mesh serve`` runs as a real process here, so what it imports is its own: a fresh
data directory holds no A2A journal until an A2A request has passed the route's checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mesh.daemon._a2a import JOURNAL_FILE
from mesh.testing import SPAWN_TIMEOUT, echo_agent_command, spawn_daemon

pytestmark = pytest.mark.anyio

_V1 = {"A2A-Version": "1.0"}


def _send(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    data = {"tool": tool, "arguments": arguments}
    message = {"messageId": "first", "role": "ROLE_USER", "parts": [{"data": data}]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


def test_the_journal_is_named_as_the_wing_names_it() -> None:
    from mesh.a2a._journal import FILE

    assert JOURNAL_FILE == FILE


async def test_the_first_a2a_request_loads_the_server_behind_the_same_checks(
    tmp_path: Path,
) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    command, args = echo_agent_command()
    (manifests / "echo.toml").write_text(
        f'id = "echo"\n[transport]\ntype = "stdio"\ncommand = {json.dumps(command)}\n'
        f"args = {json.dumps(args)}\n"
    )
    data = tmp_path / "data"
    async with spawn_daemon(manifests, extra_args=["--data-dir", str(data)]) as daemon:
        await daemon.wait_online("echo")
        journal = data / JOURNAL_FILE
        assert not journal.exists(), "the A2A server loaded before anyone asked for it"
        card = f"{daemon.http}/a2a/echo/.well-known/agent-card.json"
        with anyio.fail_after(SPAWN_TIMEOUT):
            async with httpx.AsyncClient(timeout=SPAWN_TIMEOUT) as stranger:
                assert (await stranger.get(card)).status_code == 401
            async with daemon.client(timeout=SPAWN_TIMEOUT) as admin:
                missing = await admin.get(f"{daemon.http}/a2a/nobody/.well-known/agent-card.json")
                assert missing.status_code == 404, missing.text
                assert not journal.exists(), "a refused request loaded the A2A server"
                shown = await admin.get(card)
                assert shown.status_code == 200, shown.text
                assert shown.json()["name"] == "Echo"  # the echo agent's own, from agent/info
                assert journal.exists()
                sent = await admin.post(
                    f"{daemon.http}/a2a/echo", json=_send("reverse", {"text": "ab"}), headers=_V1
                )
        task = sent.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        assert task["artifacts"][0]["parts"] == [{"data": {"text": "ba"}}]
