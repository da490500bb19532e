"""MCP both ways: mount any MCP server as a mesh agent, serve the mesh's agents to MCP clients.

- :class:`McpCodec` (``MCP_CODEC``): MCP's JSON-RPC 2.0 as a session codec, so an
  MCP link has the mesh's deadlines, cancels, progress and liveness.
- :func:`mcp_connector` / :func:`open_mcp_mount`: an MCP server (stdio, or
  :func:`open_mcp_http_client` for streamable HTTP) as a connector the
  orchestrator links like any agent. A manifest says ``protocol = "mcp"``.
- :class:`ToolCatalog`, :class:`McpServer`, :func:`serve_mcp`: the mesh's tools to
  an MCP client; the daemon serves them at ``/mcp`` and ``mesh mcp`` relays stdio there.

See ``docs/mcp.md``. The manifest loader imports :mod:`mesh.mcp._manifest` the first
time a manifest names the ``mcp`` protocol; this package itself loads none of the
orchestrator, so ``mesh mcp`` (the stdio relay) starts with only what it relays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mesh._public import lazy_names

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
    from mesh.mcp._catalog import ExtraTool, ToolCatalog, call_result, error_result
    from mesh.mcp._codec import MCP_CODEC, McpCodec
    from mesh.mcp._http import McpHttpStream, open_mcp_http_client
    from mesh.mcp._link import MountStream, mcp_connector, open_mcp_mount
    from mesh.mcp._mount import McpMount, Revision, tool_result
    from mesh.mcp._names import exposed_names
    from mesh.mcp._revisions import HANDSHAKE_REVISIONS, MODERN, REVISIONS
    from mesh.mcp._server import McpServer, serve_mcp

__all__ = [
    "HANDSHAKE_REVISIONS",
    "MCP_CODEC",
    "MODERN",
    "REVISIONS",
    "ExtraTool",
    "McpCodec",
    "McpHttpStream",
    "McpMount",
    "McpServer",
    "MountStream",
    "Revision",
    "ToolCatalog",
    "call_result",
    "error_result",
    "exposed_names",
    "mcp_connector",
    "open_mcp_http_client",
    "open_mcp_mount",
    "serve_mcp",
    "tool_result",
]

#: Where each public name lives: imported on first use (``mesh._public.lazy_names``), so
#: the daemon's MCP server does not load the client side (httpx, OAuth, mounts) with it.
_WHERE: dict[str, str] = {
    "HANDSHAKE_REVISIONS": "mesh.mcp._revisions",
    "MCP_CODEC": "mesh.mcp._codec",
    "MODERN": "mesh.mcp._revisions",
    "REVISIONS": "mesh.mcp._revisions",
    "ExtraTool": "mesh.mcp._catalog",
    "McpCodec": "mesh.mcp._codec",
    "McpHttpStream": "mesh.mcp._http",
    "McpMount": "mesh.mcp._mount",
    "McpServer": "mesh.mcp._server",
    "MountStream": "mesh.mcp._link",
    "Revision": "mesh.mcp._mount",
    "ToolCatalog": "mesh.mcp._catalog",
    "call_result": "mesh.mcp._catalog",
    "error_result": "mesh.mcp._catalog",
    "exposed_names": "mesh.mcp._names",
    "mcp_connector": "mesh.mcp._link",
    "open_mcp_http_client": "mesh.mcp._http",
    "open_mcp_mount": "mesh.mcp._link",
    "serve_mcp": "mesh.mcp._server",
    "tool_result": "mesh.mcp._mount",
}
__getattr__, __dir__ = lazy_names(globals(), _WHERE)
