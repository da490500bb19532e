"""Slow starters: an MCP server over stdio gets ``start_timeout`` (a manifest setting; 60 s
by default, for a cold ``npx -y``) to come up, and one that never does says so and is
spawned again only after a backoff."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mesh import EMBEDDER, MeshOrchestrator, load_manifest
from mesh.manifests._types import MCP_START_TIMEOUT
from tests.mcp._peers import ROOT, filesystem_command, mcp_server_command

pytestmark = pytest.mark.anyio

#: How long the server sleeps before it speaks: past the orchestrator's connect_timeout.
DELAY = 4.0


def slow_manifest(directory: Path, start_timeout: float | None) -> Path:
    command, args = mcp_server_command()
    setting = "" if start_timeout is None else f"start_timeout = {start_timeout}\n"
    path = directory / "peer.toml"
    path.write_text(
        f"""id = "peer"
{setting}[transport]
type = "stdio"
command = {json.dumps(command)}
args = {json.dumps(args)}
protocol = "mcp"
env = {{ PYTHONPATH = {json.dumps(str(ROOT))}, TEST_PEER_START_DELAY = "{DELAY}" }}
"""
    )
    return path


async def test_a_slow_server_is_mounted_within_its_start_timeout(tmp_path: Path) -> None:
    assert load_manifest(slow_manifest(tmp_path, None)).start_timeout == MCP_START_TIMEOUT
    # The orchestrator's own allowance is shorter than the server's start: the manifest's wins.
    async with MeshOrchestrator.from_manifests(tmp_path, connect_timeout=1) as mesh:
        with anyio.fail_after(MCP_START_TIMEOUT):
            async with mesh.registry.subscribe() as changes:
                async for _ in changes:
                    if mesh.agents():
                        break
            await anyio.wait_all_tasks_blocked()  # the link is handed over just after
        assert await mesh.call_tool("peer", "add", {"a": 1, "b": 1}, on_behalf_of=EMBEDDER) == {
            "result": 2
        }


async def test_a_server_that_never_comes_up_says_so_and_backs_off(tmp_path: Path) -> None:
    slow_manifest(tmp_path, start_timeout=0.5)
    async with MeshOrchestrator.from_manifests(tmp_path, connect_timeout=1) as mesh:
        with mesh.watch_links() as changes, anyio.fail_after(60):
            while "never came up" not in (mesh.link_error("peer") or ""):
                await changes.next()
        said = mesh.link_error("peer") or ""
        assert "not connected within 0.5 s (start_timeout)" in said, said
        assert mesh.agents() == []


async def test_a_pinned_revision_the_server_lacks_is_said_once(tmp_path: Path) -> None:
    command, *args = filesystem_command(str(tmp_path))
    (tmp_path / "fs.toml").write_text(
        f"""id = "fs"
[transport]
type = "stdio"
command = {json.dumps(command)}
args = {json.dumps(args)}
protocol = "mcp"
mcp_revision = "2026-07-28"
"""
    )
    async with MeshOrchestrator.from_manifests(tmp_path, connect_timeout=30) as mesh:
        with mesh.watch_links() as changes, anyio.fail_after(60):
            while "gave up" not in (mesh.link_error("fs") or ""):
                await changes.next()
        said = mesh.link_error("fs") or ""
        assert "after 1 attempt" in said and "does not speak 2026-07-28" in said, said
