"""The MCP part of ``make demo``: MCP both ways, through one daemon.

An MCP server (a few lines with the ``mcp`` SDK's ``MCPServer``) is mounted by a
manifest that says ``protocol = "mcp"``, and its tool is called through the mesh;
then an MCP client (the SDK's ``Client``) launches ``mesh mcp`` as MCP hosts do and
calls a mesh agent's tool. The ``mcp`` SDK is a dev/bench dependency, not a
runtime one: without it this part says so and is skipped.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from mesh.testing import spawn_daemon

#: The MCP server the tour mounts: a stand-in for any of the thousands that exist.
SERVER = textwrap.dedent(
    '''
    from mcp.server.mcpserver import MCPServer

    app = MCPServer("units", log_level="WARNING")

    @app.tool()
    def celsius_to_fahrenheit(celsius: float) -> float:
        """Convert a temperature."""
        return celsius * 9 / 5 + 32

    app.run()
    '''
)

ECHO = """id = "echo"
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio"]
"""


def say(text: str = "") -> None:
    print(text, flush=True)


def _write_manifests(root: Path) -> Path:
    (root / "units_server.py").write_text(SERVER)
    manifests = root / "manifests"
    manifests.mkdir()
    (manifests / "echo.toml").write_text(ECHO)
    (manifests / "units.toml").write_text(
        f'id = "units"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
        f'args = [{json.dumps(str(root / "units_server.py"))}]\nprotocol = "mcp"\n'
    )
    return manifests


async def mcp_tour() -> None:
    say("\n== MCP both ways ==")
    try:
        from mcp.client import Client
        from mcp.client.stdio import StdioServerParameters
    except ImportError:
        say("  (skipped: the `mcp` SDK is not installed; `pip install mcp` to see this part)")
        return
    with tempfile.TemporaryDirectory(prefix="mesh-demo-mcp-") as tmp:
        manifests = _write_manifests(Path(tmp))
        data = ["--data-dir", str(Path(tmp, "data")), "--log-level", "warning"]
        async with spawn_daemon(manifests, extra_args=data) as daemon:
            await daemon.wait_online("echo", "units")
            token = daemon.token or ""  # an MCP host would hold a client token
            async with daemon.client() as http:
                body = {
                    "agent": "units",
                    "method": "tools/call",
                    "params": {"name": "celsius_to_fahrenheit", "arguments": {"celsius": 100}},
                }
                answer = (await http.post("/rpc", json=body)).json()
            say("  an MCP server mounted as agent 'units' (manifest: protocol = \"mcp\"):")
            say(f"    POST /rpc units celsius_to_fahrenheit(100) -> {json.dumps(answer)}")
            host = StdioServerParameters(
                command=sys.executable,
                args=["-m", "mesh.cli", "mcp", "--url", daemon.http],
                env={"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "MESH_TOKEN": token},
            )
            async with Client(host) as client:
                names = [tool.name for tool in (await client.list_tools()).tools]
                result: Any = await client.call_tool("echo__echo", {"message": "hi from MCP"})
            say("  an MCP client (the mcp SDK's Client) launched `mesh mcp`:")
            say(f"    tools/list -> {', '.join(names[:4])}, ... ({len(names)} tools)")
            say(f"    tools/call echo__echo -> {json.dumps(result.structured_content)}")
            if result.is_error or result.structured_content != {"message": "hi from MCP"}:
                raise SystemExit(f"the MCP client got {result!r}")
            if answer.get("result") != {"result": 212.0}:
                raise SystemExit(f"the mounted MCP server answered {answer!r}")
