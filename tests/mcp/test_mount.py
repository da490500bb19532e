"""An MCP server mounted as a mesh agent: the mcp SDK's MCPServer over stdio and streamable
HTTP, in each revision, with every guarantee a mesh link has.

Over stdio the server's process is the link, so each test starts its own. Over HTTP each
mount opens a session of its own, so one server per backend serves them all; the one
count it keeps across sessions (cancelled calls) is read as a difference.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh import (
    EMBEDDER,
    CallTimeout,
    ConnectionLost,
    ManifestError,
    MeshOrchestrator,
    ToolError,
    load_manifest,
    open_peer,
)
from mesh.mcp import open_mcp_mount
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.mcp._peers import PEER_ENV, mcp_server_command, spawn_mcp_http_server
from transports import open_stdio_process

pytestmark = pytest.mark.anyio

#: What each requested revision ends up as against MCPServer (auto prefers 2026-07-28).
REVISIONS = [("auto", "2026-07-28"), ("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18")]


def stdio_manifest(directory: Path, revision: str = "auto", agent_id: str = "peer") -> Path:
    command, args = mcp_server_command()
    path = directory / f"{agent_id}.toml"
    path.write_text(
        f"""id = "{agent_id}"
capabilities = ["math"]
heartbeat_interval = 5.0
[transport]
type = "stdio"
command = {json.dumps(command)}
args = {json.dumps(args)}
protocol = "mcp"
mcp_revision = "{revision}"
env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in PEER_ENV.items())} }}
"""
    )
    return path


def http_manifest(directory: Path, url: str, revision: str) -> Path:
    path = directory / "peer.toml"
    path.write_text(
        f"""id = "peer"
[transport]
type = "http"
endpoint = "{url}"
protocol = "mcp"
mcp_revision = "{revision}"
"""
    )
    return path


async def wait_mounted(mesh: MeshOrchestrator) -> None:
    """Until the server is online: on a loaded machine it may start after the orchestrator
    stopped waiting for its links (it has the manifest's start_timeout)."""
    with anyio.fail_after(60):
        async with mesh.registry.subscribe() as changes:
            if not mesh.agents():
                async for _ in changes:
                    if mesh.agents():
                        break
    await anyio.wait_all_tasks_blocked()  # the link is handed over just after


async def check_agent(mesh: MeshOrchestrator, revision: str, transport: str) -> None:
    """What every mounted server must do, whatever carries it."""
    await wait_mounted(mesh)
    (record,) = mesh.agents()
    assert (record.id, str(record.status), record.transport) == ("peer", "online", transport)
    info = await mesh.call("peer", "agent/info", on_behalf_of=EMBEDDER)
    assert (info["protocol"], info["revision"], info["name"]) == ("mcp", revision, "test-peer")
    tools = {tool["name"]: tool for tool in await mesh.list_tools("peer", on_behalf_of=EMBEDDER)}
    assert {"add", "shout", "boom", "slow", "wait"} <= set(tools)
    assert tools["add"]["inputSchema"]["required"] == ["a", "b"]
    assert await mesh.call_tool("peer", "add", {"a": 2, "b": 3}, on_behalf_of=EMBEDDER) == {
        "result": 5
    }
    with pytest.raises(ToolError, match="Error executing tool boom") as raised:
        await mesh.call_tool("peer", "boom", on_behalf_of=EMBEDDER)
    assert raised.value.agent == "peer"
    with pytest.raises(ToolError, match="validation error"):  # MCP: bad arguments are isError
        await mesh.call_tool("peer", "add", {"a": "two"}, on_behalf_of=EMBEDDER)
    assert await mesh.ping("peer", on_behalf_of=EMBEDDER) >= 0
    outcomes = await mesh.broadcast(
        "tools/call", {"name": "shout", "arguments": {"text": "hi"}}, on_behalf_of=EMBEDDER
    )
    assert outcomes["peer"].result == {"result": "HI"}


@pytest.mark.parametrize(("requested", "agreed"), REVISIONS)
async def test_mcpserver_over_stdio(tmp_path: Path, requested: str, agreed: str) -> None:
    stdio_manifest(tmp_path, requested)
    async with MeshOrchestrator.from_manifests(tmp_path) as mesh:
        await check_agent(mesh, agreed, "stdio")


@pytest.fixture(scope="module")
async def http_server(anyio_backend: str) -> AsyncIterator[str]:
    """The MCPServer over streamable HTTP, once per backend: its URL."""
    async with spawn_mcp_http_server() as url:
        yield url


@pytest.mark.parametrize(("requested", "agreed"), REVISIONS)
async def test_mcpserver_over_streamable_http(
    tmp_path: Path, http_server: str, requested: str, agreed: str
) -> None:
    http_manifest(tmp_path, http_server, requested)
    async with MeshOrchestrator.from_manifests(tmp_path) as mesh:
        await check_agent(mesh, agreed, "http")
        # a deadline becomes a cancel the server acts on, and the link lives on
        before = await cancelled(mesh)
        with pytest.raises(CallTimeout):
            await mesh.call_tool(
                "peer", "wait", {"seconds": 30}, timeout=0.3, on_behalf_of=EMBEDDER
            )
        await wait_until_cancelled(mesh, before)


async def cancelled(mesh: MeshOrchestrator) -> int:
    """How many `wait` calls the server saw cancelled, in every session it served."""
    answer = await mesh.call_tool("peer", "cancelled", on_behalf_of=EMBEDDER)
    return int(answer["result"])


async def wait_until_cancelled(mesh: MeshOrchestrator, before: int) -> None:
    """Ask the server until it reports one more cancelled `wait` (each ask a round trip)."""
    with anyio.fail_after(10):
        while await cancelled(mesh) == before:
            await anyio.lowlevel.checkpoint()


@pytest.mark.parametrize(("requested", "agreed"), REVISIONS[:2])
async def test_deadlines_cancels_progress_and_list_changes(
    tmp_path: Path, requested: str, agreed: str
) -> None:
    command, args = mcp_server_command()
    wire = partial(open_stdio_process, command, args, env=PEER_ENV)
    async with (
        open_mcp_mount(wire, agent="peer", revision=requested) as stream,  # type: ignore[arg-type]
        open_peer(stream, agent="peer") as peer,
    ):
        seen: list[Mapping[str, Any]] = []
        assert await peer.call_tool("slow", {"steps": 3}, on_progress=seen.append) == {
            "result": "done"
        }
        assert [p["progress"] for p in seen] == [1, 2, 3]
        assert seen[-1]["total"] == 3 and seen[-1]["message"] == "step 3"
        with pytest.raises(CallTimeout):
            await peer.call_tool("wait", {"seconds": 30}, timeout=0.3)
        with anyio.fail_after(10):  # the cancel reached the server's handler
            while await peer.call_tool("cancelled") == {"result": 0}:
                await anyio.lowlevel.checkpoint()
        with anyio.move_on_after(0.2):  # a caller that gives up cancels too
            await peer.call_tool("wait", {"seconds": 30})
        with anyio.fail_after(10):
            while await peer.call_tool("cancelled") == {"result": 1}:
                await anyio.lowlevel.checkpoint()
        assert await peer.call_tool("grow", {"name": "fresh"}) == {"result": "grown"}
        with anyio.fail_after(10):  # list_changed (or, in 2026-07-28, the listen stream)
            while "fresh" not in {t["name"] for t in await peer.list_tools()}:
                await anyio.lowlevel.checkpoint()
        assert await peer.call_tool("fresh") == {"result": "fresh here"}
        assert peer.info.kind == "stdio"


async def test_a_server_killed_mid_call_fails_the_call_at_once(tmp_path: Path) -> None:
    stdio_manifest(tmp_path)
    async with MeshOrchestrator.from_manifests(tmp_path) as mesh:
        pid = (await mesh.call_tool("peer", "pid", on_behalf_of=EMBEDDER))["result"]
        failure: list[ConnectionLost] = []

        async def call() -> None:
            try:
                await mesh.call_tool("peer", "wait", {"seconds": 60}, on_behalf_of=EMBEDDER)
            except ConnectionLost as exc:
                failure.append(exc)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.wait_all_tasks_blocked()
                os.kill(pid, signal.SIGKILL)
        (error,) = failure
        assert "SIGKILL" in str(error) and error.agent == "peer", error


async def test_an_unreachable_server_is_a_link_error_not_a_hang(tmp_path: Path) -> None:
    http_manifest(tmp_path, "http://127.0.0.1:9/mcp", "auto")
    async with MeshOrchestrator.from_manifests(tmp_path, connect_timeout=5) as mesh:
        assert mesh.agents() == []
        assert "unreachable" in (mesh.link_error("peer") or "")


def test_a_manifest_says_protocol_mcp(tmp_path: Path) -> None:
    manifest = load_manifest(stdio_manifest(tmp_path, "2025-11-25"))
    assert manifest.transport.protocol == "mcp"  # type: ignore[union-attr]
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'id = "bad"\n[transport]\ntype = "stdio"\ncommand = "x"\nmcp_revision = "2025-11-25"\n'
    )
    with pytest.raises(ManifestError, match=r"protocol = \"mcp\".*\$\.transport\.mcp_revision"):
        load_manifest(bad)
    bad.write_text('id = "bad"\n[transport]\ntype = "stdio"\ncommand = "x"\nprotocol = "soap"\n')
    with pytest.raises(ManifestError, match=r"\$\.transport\.protocol"):
        load_manifest(bad)
