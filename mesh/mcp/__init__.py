"""MCP both ways: mount any MCP server as a mesh agent, serve the mesh's agents to MCP clients.

- :class:`McpCodec` (``MCP_CODEC``): MCP's JSON-RPC 2.0 as a session codec, so an
  MCP link has the mesh's deadlines, cancels, progress and liveness.
- :func:`mcp_connector` / :func:`open_mcp_mount`: an MCP server (stdio, or
  :func:`open_mcp_http_client` for streamable HTTP) as a connector the
  orchestrator links like any agent. A manifest says ``protocol = "mcp"``.
- :class:`ToolCatalog`, :class:`McpServer`, :func:`serve_mcp`: the mesh's tools to
  an MCP client; the daemon serves them at ``/mcp`` and ``mesh mcp`` relays stdio there.

See ``docs/mcp.md``. Importing this package registers the ``mcp`` protocol with the
manifest loader, which imports it the first time a manifest names that protocol.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

from mesh._orchestrator.links import PROTOCOL_ADAPTERS
from mesh._orchestrator.spec import AgentSpec
from mesh._public import lazy_names
from mesh._rpc.connect import DEFAULT_CONNECT_TIMEOUT
from mesh.manifests import HttpSection, Manifest
from transports import Connector

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


def _mount_manifest(
    manifest: Manifest, spec: AgentSpec, environ: Mapping[str, str] | None
) -> Connector:
    """The connector for a manifest with ``protocol = "mcp"``."""
    from mesh.mcp._http import open_mcp_http_client
    from mesh.mcp._link import mcp_connector
    from mesh.mcp._oauth import oauth_settings

    transport = manifest.transport
    config = spec.session_config()
    wire: Connector | None = spec.connector  # stdio: the child, spawned as for any agent
    if isinstance(transport, HttpSection):
        # The endpoint is the MCP URL itself, and an HTTP link has no idle line to watch.
        wire = partial(
            open_mcp_http_client,
            transport.endpoint,
            token=transport.token(environ),
            max_frame_size=manifest.max_frame_size,
            oauth=oauth_settings(manifest.id, transport, environ),
        )
        config = dataclasses.replace(config, heartbeat_interval=None, heartbeat_ttl=None)
    assert wire is not None
    revision: Revision = getattr(transport, "mcp_revision", "auto")
    start = spec.start_timeout or DEFAULT_CONNECT_TIMEOUT
    return mcp_connector(
        wire, agent=manifest.id, config=config, revision=revision, connect_timeout=start
    )


PROTOCOL_ADAPTERS["mcp"] = _mount_manifest
