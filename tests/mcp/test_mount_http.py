"""Mounting over streamable HTTP against servers that use the wire's harder corners: the
TypeScript SDK 1.x server (``auto`` must fall back from ``server/discover``), and a
server that cuts a call's event stream mid-call (the call resumes with ``Last-Event-ID``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh import EMBEDDER, MeshOrchestrator
from tests.mcp._peers import spawn_everything_http_server, spawn_mcp_http_server
from tests.mcp.test_mount import wait_mounted

pytestmark = pytest.mark.anyio


def http_manifest(directory: Path, url: str, agent_id: str = "peer") -> Path:
    path = directory / f"{agent_id}.toml"
    path.write_text(
        f"""id = "{agent_id}"
[transport]
type = "http"
endpoint = "{url}"
protocol = "mcp"
"""
    )
    return path


async def test_a_typescript_sdk_server_mounts_with_auto(tmp_path: Path) -> None:
    """Its refusal of ``server/discover`` is an HTTP 400 with ``id: null``: the mount must
    read it as the answer to that request and fall back to ``initialize`` at once."""
    async with spawn_everything_http_server() as url:
        http_manifest(tmp_path, url, "everything")
        with anyio.fail_after(30):
            async with MeshOrchestrator.from_manifests(tmp_path, connect_timeout=20) as mesh:
                (record,) = mesh.agents()
                assert str(record.status) == "online", mesh.link_error("everything")
                info = await mesh.call("everything", "agent/info", on_behalf_of=EMBEDDER)
                assert info["revision"] in ("2025-06-18", "2025-11-25")
                assert info["name"] == "Everything Reference Server"
                echoed = await mesh.call_tool(
                    "everything", "echo", {"message": "hi"}, on_behalf_of=EMBEDDER
                )
                assert echoed == "Echo: hi"


async def test_a_call_whose_stream_is_cut_resumes_with_last_event_id(tmp_path: Path) -> None:
    """``cut`` reports progress, closes its event stream after an event with an id and a
    ``retry``, and answers on the resumed stream: the call completes, progress and all.
    (2025-11-25: the SDK's server cuts streams only in a session.)"""
    async with spawn_mcp_http_server() as url:
        path = http_manifest(tmp_path, url)
        path.write_text(path.read_text() + 'mcp_revision = "2025-11-25"\n')
        async with MeshOrchestrator.from_manifests(tmp_path) as mesh:
            await wait_mounted(mesh)
            seen: list[Mapping[str, Any]] = []
            with anyio.fail_after(10):  # the call's own deadline is 60 s
                result = await mesh.call_tool(
                    "peer", "cut", on_progress=seen.append, on_behalf_of=EMBEDDER
                )
            assert result == {"result": "resumed"}
            assert [update.get("message") for update in seen] == ["before the cut", "after the cut"]
            assert await mesh.call_tool("peer", "add", {"a": 1, "b": 2}, on_behalf_of=EMBEDDER) == {
                "result": 3
            }
