"""Any protocol to any other through the daemon, with progress and cancel carried across:
an MCP client (the mcp SDK through ``mesh mcp``) calls a mounted A2A agent (the a2a-sdk's
server), and an A2A client (the a2a-sdk's) calls a mounted MCP server (the mcp SDK's)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import CancelTaskRequest, TaskState
from mcp.client import Client

from mesh.testing import Daemon, spawn_daemon
from tests.a2a._mesh import as_dict, tool_message
from tests.a2a._peer import spawn_sdk_agent
from tests.a2a.test_mount import manifest
from tests.mcp._peers import MCP_SERVER
from tests.mcp.test_serve import mesh_mcp

pytestmark = pytest.mark.anyio

GUARD = 60.0
MCP_PEER = f"""id = "calc"
[transport]
type = "stdio"
command = "python"
args = ["{MCP_SERVER}"]
protocol = "mcp"
"""


async def test_an_mcp_client_calls_a_mounted_a2a_agent_with_progress_and_cancel(
    tmp_path: Path,
) -> None:
    async with spawn_sdk_agent() as peer:
        manifests = tmp_path / "manifests"
        manifests.mkdir()
        (manifests / "shouter.toml").write_text(manifest(peer.url))
        data = ["--data-dir", str(tmp_path / "data")]
        async with spawn_daemon(manifests, extra_args=data) as daemon:
            await daemon.wait_online("shouter")
            async with Client(mesh_mcp(daemon)) as client:
                with anyio.fail_after(GUARD):
                    shouted = await client.call_tool("shouter__shout", {"text": "psst"})
                    assert shouted.content[0].text == "PSST"  # type: ignore[union-attr]
                    heard: list[str | None] = []

                    async def progress(
                        progress: float, total: float | None, message: str | None
                    ) -> None:
                        heard.append(message)

                    counted = await client.call_tool(
                        "shouter__count", {"to": 2, "every": 0.01}, progress_callback=progress
                    )
                    assert counted.structured_content == {"counted": 2}
                    assert heard == ["counted 1 of 2", "counted 2 of 2"]
                    started = anyio.Event()

                    async def first(
                        progress: float, total: float | None, message: str | None
                    ) -> None:
                        started.set()

                    async with anyio.create_task_group() as tg:
                        arguments = {"to": 100_000, "every": 0.05}
                        tg.start_soon(
                            lambda: client.call_tool(
                                "shouter__count", arguments, progress_callback=first
                            )
                        )
                        await started.wait()
                        tg.cancel_scope.cancel()  # the MCP client gives up...
                    assert await peer.wait_cancelled()  # ...and the A2A task is cancelled


async def test_an_a2a_client_calls_a_mounted_mcp_server_with_progress_and_cancel(
    tmp_path: Path,
) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "calc.toml").write_text(MCP_PEER.replace("python", sys.executable, 1))
    data = ["--data-dir", str(tmp_path / "data")]
    async with spawn_daemon(manifests, extra_args=data) as daemon:
        await daemon.wait_online("calc")
        async with _sdk(daemon, streaming=True) as client:
            with anyio.fail_after(GUARD):
                request = tool_message("slow", steps=3)
                events = [as_dict(e) async for e in client.send_message(request)]
        said = [_status_text(e) for e in events if _status_text(e)]
        assert said == ["step 1", "step 2", "step 3"]
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        async with _sdk(daemon, streaming=False) as client:
            with anyio.fail_after(GUARD):
                request = tool_message("wait", seconds=600)
                request.configuration.return_immediately = True
                sent = [e async for e in client.send_message(request)]
                cancelled = await client.cancel_task(CancelTaskRequest(id=sent[-1].task.id))
                assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
                # The cancel reached the MCP server's handler (each ask is a round trip).
                while await _ask(client, "cancelled") == {"result": 0}:
                    pass


def _status_text(event: dict[str, Any]) -> str:
    message = event.get("statusUpdate", {}).get("status", {}).get("message", {})
    return "".join(p.get("text", "") for p in message.get("parts", ()))


async def _ask(client: Any, tool: str) -> Any:
    """The result of ``tool`` (no arguments), from the completed task's artifact."""
    events = [e async for e in client.send_message(tool_message(tool))]
    return as_dict(events[-1].task.artifacts[0])["parts"][0]["data"]


@asynccontextmanager
async def _sdk(daemon: Daemon, *, streaming: bool) -> AsyncIterator[Any]:
    """The a2a-sdk's client for the mounted MCP server, as the daemon serves it."""
    headers = {"Authorization": f"Bearer {daemon.token}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        card = await A2ACardResolver(http, f"{daemon.http}/a2a/calc").get_agent_card()
        yield ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
