"""``mesh room watch`` whose token is revoked while it follows exits 8, as documented."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from mesh.testing import spawn_daemon
from tests.integration._daemon import LONG_LIMITS
from tests.integration.test_cli_rooms import persona_manifest

pytestmark = pytest.mark.anyio


async def test_watch_exits_8_when_its_token_is_revoked(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", ["Tea at turn {turn}."], 0.5)
    persona_manifest(manifests, "bob", ["Coffee at turn {turn}."], 0.5)
    async with spawn_daemon(manifests, extra_args=["--data-dir", str(tmp_path / "d")]) as daemon:
        await daemon.wait_online("alice", "bob")
        async with daemon.client() as admin:
            body: dict[str, object] = {"topic": "Long", "members": ["alice", "bob"], "id": "long"}
            body["limits"] = LONG_LIMITS
            assert (await admin.post("/rooms", json=body)).status_code == 201
            made = await admin.post("/tokens", json={"role": "observer", "name": "eyes"})
            token = made.json()["token"]
            command = [sys.executable, "-m", "mesh.cli", "room", "watch", "long"]
            env = {**daemon.env(), "MESH_TOKEN": token}
            async with await anyio.open_process(command, env=env) as watch:
                assert watch.stdout is not None
                with anyio.fail_after(60):
                    await watch.stdout.receive()  # it follows: an event reached the terminal
                assert (await admin.delete("/tokens/eyes")).status_code == 200
                with anyio.fail_after(60):
                    assert await watch.wait() == 8
            await admin.post("/rooms/long/stop")
