"""Answers over a frame limit, against real servers: the call fails at once and says
whose limit it is, the link lives on, and a manifest's ``max_frame_size`` raises it."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mesh import EMBEDDER, MeshOrchestrator, MessageTooLarge
from tests.mcp._peers import filesystem_command, spawn_mcp_http_server
from tests.mcp.test_mount import http_manifest

pytestmark = pytest.mark.anyio

#: Small, so the answers over it are cheap; the file's answer (text and structured) is ~2x it.
LIMIT = 64 * 1024
FILE_SIZE = 100_000
#: A call's own deadline, far beyond "at once": failing by it would be the old hang.
DEADLINE = 120.0


def filesystem_manifest(directory: Path, served: Path, agent: str, limit: int) -> None:
    command, *args = filesystem_command(str(served))
    (directory / f"{agent}.toml").write_text(
        f"""id = "{agent}"
max_frame_size = {limit}
[transport]
type = "stdio"
command = {json.dumps(command)}
args = {json.dumps(args)}
protocol = "mcp"
"""
    )


async def test_an_oversized_answer_over_stdio_fails_at_once(tmp_path: Path) -> None:
    served, manifests = tmp_path / "served", tmp_path / "manifests"
    served.mkdir()
    manifests.mkdir()
    big = served / "big.txt"
    big.write_text("0123456789abcdef\n" * (FILE_SIZE // 17))
    filesystem_manifest(manifests, served, "fs", LIMIT)
    filesystem_manifest(manifests, served, "roomy", 4 * FILE_SIZE)  # its manifest raises it
    async with MeshOrchestrator.from_manifests(manifests, connect_timeout=60) as mesh:
        assert {str(r.id) for r in mesh.agents()} == {"fs", "roomy"}, mesh.link_error("fs")
        with anyio.fail_after(DEADLINE / 2), pytest.raises(MessageTooLarge) as raised:
            await mesh.call_tool(
                "fs", "read_text_file", {"path": str(big)}, timeout=DEADLINE, on_behalf_of=EMBEDDER
            )
        said = str(raised.value)
        assert "-byte limit of agent 'fs' (max_frame_size)" in said, said
        assert f"exceeds the {LIMIT}-byte limit" in said and said.count("agent 'fs'") == 1, said
        # The link lives on, and the server was told nothing it could choke on.
        small = await mesh.call_tool(
            "fs", "list_allowed_directories", timeout=DEADLINE, on_behalf_of=EMBEDDER
        )
        assert str(served) in json.dumps(small)
        read = await mesh.call_tool(
            "roomy", "read_text_file", {"path": str(big)}, on_behalf_of=EMBEDDER
        )
        assert read == {"content": big.read_text()}


async def test_an_oversized_answer_over_http_fails_at_once(tmp_path: Path) -> None:
    async with spawn_mcp_http_server() as url:
        http_manifest(tmp_path, url, "2025-11-25")
        text = (tmp_path / "peer.toml").read_text()
        (tmp_path / "peer.toml").write_text(f"max_frame_size = {LIMIT}\n" + text)
        async with MeshOrchestrator.from_manifests(tmp_path) as mesh:
            with anyio.fail_after(DEADLINE / 2), pytest.raises(MessageTooLarge) as raised:
                await mesh.call_tool(
                    "peer", "blob", {"size": 2 * LIMIT}, timeout=DEADLINE, on_behalf_of=EMBEDDER
                )
            said = str(raised.value)
            assert "limit of agent 'peer' (max_frame_size)" in said, said
            assert "JSON" not in said, said
            assert await mesh.call_tool("peer", "blob", {"size": 10}, on_behalf_of=EMBEDDER) == {
                "result": "x" * 10
            }
