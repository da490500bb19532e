"""The reference TypeScript server (npm ``@modelcontextprotocol/server-everything``), mounted.

It negotiates a handshake-era revision, sends ``notifications/tools/list_changed``
before it answers ``tools/list``, lists 15 tools (two of them only because the mesh
declares it can be asked for sampling and elicitation), answers an unknown tool with
a *result* carrying ``isError``, and its sampling request reaches the mesh's caller.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from mesh import EMBEDDER, MeshOrchestrator, ToolError
from mesh.content import CONTENT_KEY
from mesh.testing import spawn_daemon
from tests.mcp._peers import everything_command

pytestmark = pytest.mark.anyio


async def test_server_everything_over_stdio(tmp_path: Path) -> None:
    command, *args = everything_command()
    (tmp_path / "everything.toml").write_text(
        f"""id = "everything"
[transport]
type = "stdio"
command = {json.dumps(command)}
args = {json.dumps(args)}
protocol = "mcp"
"""
    )
    async with MeshOrchestrator.from_manifests(tmp_path, connect_timeout=30) as mesh:
        (record,) = mesh.agents()
        assert str(record.status) == "online", mesh.link_error("everything")
        info = await mesh.call("everything", "agent/info", on_behalf_of=EMBEDDER)
        assert info["revision"] in ("2025-06-18", "2025-11-25")
        assert info["name"] == "Everything Reference Server"
        tools = {
            tool["name"] for tool in await mesh.list_tools("everything", on_behalf_of=EMBEDDER)
        }
        assert len(tools) == 15 and {"echo", "get-sum", "trigger-sampling-request"} <= tools
        assert (
            await mesh.call_tool("everything", "echo", {"message": "hi"}, on_behalf_of=EMBEDDER)
            == "Echo: hi"
        )
        assert "3" in str(
            await mesh.call_tool("everything", "get-sum", {"a": 1, "b": 2}, on_behalf_of=EMBEDDER)
        )
        with pytest.raises(ToolError, match="nope"):
            await mesh.call_tool("everything", "nope", on_behalf_of=EMBEDDER)
        asked: list[dict[str, Any]] = []

        async def model(params: dict[str, Any]) -> dict[str, Any]:
            asked.append(params)
            return {"role": "assistant", "content": {"type": "text", "text": "42"}, "model": "m"}

        sampled = await mesh.call_tool(
            "everything",
            "trigger-sampling-request",
            {"prompt": "the answer?", "maxTokens": 10},
            on_behalf_of=EMBEDDER,
            on_sample=model,
        )
        assert '"text": "42"' in str(sampled)
        assert asked[0]["maxTokens"] == 10 and "the answer?" in str(asked[0]["messages"])
        # resources and prompts pass through as they are
        listed = await mesh.call("everything", "resources/list", on_behalf_of=EMBEDDER)
        assert listed["resources"]
        prompts = await mesh.call("everything", "prompts/list", on_behalf_of=EMBEDDER)
        assert prompts["prompts"]


async def test_server_everything_content_reaches_mesh_and_mcp_clients(tmp_path: Path) -> None:
    """A mounted server's image, embedded resource, links and structured content pass
    through the daemon unchanged: to a mesh caller (``POST /rpc``) as mesh content, to an
    MCP client through ``/mcp`` as MCP's own items, not JSON text."""
    import mcp_types
    from mcp.client import Client

    from tests.mcp.test_serve import over_http

    manifests = tmp_path / "manifests"
    manifests.mkdir()
    command, *args = everything_command()
    (manifests / "everything.toml").write_text(
        f"""id = "everything"
[transport]
type = "stdio"
command = {json.dumps(command)}
args = {json.dumps(args)}
protocol = "mcp"
"""
    )
    data = ["--data-dir", str(tmp_path / "data")]
    async with spawn_daemon(manifests, extra_args=data) as daemon:
        await daemon.wait_online("everything", timeout=60)
        body = {"agent": "everything", "method": "tools/call", "params": {"name": "get-tiny-image"}}
        async with daemon.client() as http:
            answer = (await http.post("/rpc", json=body)).json()["result"]
        kinds = [item["type"] for item in answer[CONTENT_KEY]]
        assert kinds == ["text", "image", "text"], answer
        assert answer[CONTENT_KEY][1]["mimeType"] == "image/png"
        png = base64.b64decode(answer[CONTENT_KEY][1]["data"])
        assert png.startswith(b"\x89PNG")

        async with Client(over_http(daemon)) as client:
            image = await client.call_tool("everything__get-tiny-image", {})
            assert not image.is_error
            assert [type(item) for item in image.content] == [
                mcp_types.TextContent,
                mcp_types.ImageContent,
                mcp_types.TextContent,
            ]
            sent = image.content[1]
            assert isinstance(sent, mcp_types.ImageContent)
            assert sent.mime_type == "image/png" and base64.b64decode(sent.data) == png
            reference = await client.call_tool("everything__get-resource-reference", {})
            assert any(isinstance(i, mcp_types.EmbeddedResource) for i in reference.content)
            links = await client.call_tool("everything__get-resource-links", {"count": 2})
            assert sum(isinstance(i, mcp_types.ResourceLink) for i in links.content) == 2
            structured = await client.call_tool(
                "everything__get-structured-content", {"location": "New York"}
            )
            assert structured.structured_content is not None
            assert "temperature" in structured.structured_content
