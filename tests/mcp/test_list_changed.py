"""A mounted MCP server's own ``notifications/tools/list_changed`` reaches the daemon's MCP
clients (the SDK's ``Client``, handshake era) through ``mesh mcp`` and ``/mcp``, once the
mount has its new list: a host that caches its tools sees the new one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client

from tests.mcp.test_cancel import daemon_with_peer
from tests.mcp.test_serve import mesh_mcp, over_http

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("route", ["mesh mcp", "/mcp"])
async def test_a_mounted_servers_new_tool_is_announced(tmp_path: Path, route: str) -> None:
    async with daemon_with_peer(tmp_path) as daemon:
        heard: list[Any] = []

        async def on_message(message: Any) -> None:
            if "list_changed" in repr(message).lower() or "ToolListChanged" in repr(message):
                heard.append(message)

        wire = mesh_mcp(daemon) if route == "mesh mcp" else over_http(daemon)
        async with Client(wire, mode="legacy", message_handler=on_message) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "peer__add" in names and "peer__fresh" not in names
            heard.clear()  # whatever the start said; from here on only the server's change
            grown = await client.call_tool("peer__grow", {"name": "fresh"})
            assert not grown.is_error, grown
            with anyio.fail_after(30):
                while not heard:  # over /mcp it rides in front of the next answer
                    await client.list_tools()
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "peer__fresh" in names
            answer = await client.call_tool("peer__fresh", {})
            assert answer.structured_content == {"result": "fresh here"}
