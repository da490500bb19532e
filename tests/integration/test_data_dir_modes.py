"""The data directory of a real ``mesh serve`` is private: 0700, its files 0600, and a looser
existing one is warned about."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import anyio
import pytest

from mesh.testing import spawn_daemon
from tests.integration.test_cli_rooms import persona_manifest

pytestmark = pytest.mark.anyio


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_data_dir_and_what_is_in_it_are_private(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", ["Tea at turn {turn}."], 0.0)
    persona_manifest(manifests, "bob", ["Coffee at turn {turn}."], 0.0)
    data = tmp_path / "fresh" / "data"
    old = os.umask(0o022)  # the usual umask, as a shell gives it (the daemon inherits it)
    try:
        await _run_a_room(manifests, data)
    finally:
        os.umask(old)
    assert _mode(data) == 0o700
    written = [p for p in data.rglob("*") if p.is_file()]
    assert any(p.suffix == ".jsonl" for p in written), written  # the room's transcript
    assert {p.name: _mode(p) for p in written} == {p.name: 0o600 for p in written}


async def _run_a_room(manifests: Path, data: Path) -> None:
    async with spawn_daemon(manifests, extra_args=["--data-dir", str(data)]) as daemon:
        await daemon.wait_online("alice", "bob")
        async with daemon.client() as admin:
            limits = {"max_turns": 1}
            body = {"topic": "T", "members": ["alice", "bob"], "id": "r", "limits": limits}
            assert (await admin.post("/rooms", json=body)).status_code == 201


async def test_an_existing_data_dir_others_can_read_is_warned_about(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    command = [sys.executable, "-m", "mesh.cli", "serve", "--port", "0", "--log-format", "json"]
    command += ["--manifests", str(tmp_path), "--data-dir", str(data)]
    async with await anyio.open_process(command) as daemon:
        assert daemon.stderr is not None
        said = b""
        with anyio.fail_after(30):
            while b"daemon.listening" not in said:
                said += await daemon.stderr.receive()
        daemon.terminate()
        with anyio.fail_after(30):
            await daemon.wait()
    assert b"daemon.data_dir_not_private" in said and b"chmod 700" in said
