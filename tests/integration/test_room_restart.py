"""A room whose members dial in waits for them after a daemon restart, instead of failing."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
import sniffio

from mesh.rooms import ErrorEvent, MessageEvent, StoppedEvent
from mesh.testing import spawn_daemon
from tests.faults._helpers import stop_and_kill
from tests.integration.test_daemon_rooms import watch_room

pytestmark = pytest.mark.anyio


def dial_in_persona(directory: Path, agent_id: str, script: list[str]) -> None:
    (directory / f"{agent_id}.toml").write_text(
        f'''id = "{agent_id}"
name = "{agent_id.title()}"
[transport]
type = "dial-in"
token_env = "{agent_id.upper()}_TOKEN"

[persona]
system_prompt = "Keep it short."
role = "participant"

[persona.provider]
provider = "scripted"
script = {json.dumps(script)}
delay = 0.1
'''
    )


@asynccontextmanager
async def persona_process(manifest: Path, url: str) -> AsyncIterator[anyio.abc.Process]:
    agent_id = manifest.stem
    command = [sys.executable, "-m", "mesh.agents.persona", "--manifest", str(manifest)]
    command += ["--connect", url, "--token-env", f"{agent_id.upper()}_TOKEN"]
    command += ["--backend", sniffio.current_async_library()]
    process = await anyio.open_process(command, env={**os.environ, **TOKENS}, stderr=None)
    try:
        yield process
    finally:
        with anyio.CancelScope(shield=True):
            stop_and_kill(process.pid)
            await process.wait()
            await process.aclose()


TOKENS = {"ALICE_TOKEN": "alice-secret", "BOB_TOKEN": "bob-secret"}


async def test_after_a_restart_a_room_waits_for_dial_in_members_and_finishes(
    tmp_path: Path,
) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir()
    dial_in_persona(manifests, "alice", ["Tea.", "More tea.", "Still tea."])
    dial_in_persona(manifests, "bob", ["Coffee.", "More coffee.", "Still coffee."])
    args = ["--data-dir", str(tmp_path / "d")]
    async with AsyncExitStack() as agents:
        async with spawn_daemon(manifests, env=TOKENS, extra_args=args) as first:
            for agent in ("alice", "bob"):
                await agents.enter_async_context(
                    persona_process(manifests / f"{agent}.toml", first.ws)
                )
            await first.wait_online("alice", "bob")
            port = first.http.rsplit(":", 1)[1]
            async with httpx.AsyncClient(base_url=first.http) as http:
                spec: dict[str, Any] = {"id": "r", "topic": "Tea?", "members": ["alice", "bob"]}
                spec["limits"] = {"max_turns": 10}
                assert (await http.post("/rooms", json=spec)).status_code == 201
            await watch_room(first, "r", lambda e: isinstance(e, MessageEvent) and e.turn >= 2)
            first.process.send_signal(signal.SIGKILL)
            await first.process.wait()
        async with spawn_daemon(manifests, env=TOKENS, extra_args=[*args, "--port", port]) as again:
            events = await watch_room(again, "r", lambda e: isinstance(e, StoppedEvent))
    stopped = events[-1]
    assert isinstance(stopped, StoppedEvent) and stopped.reason == "MAX_TURNS", stopped
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert errors == [], errors
