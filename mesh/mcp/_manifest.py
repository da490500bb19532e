"""A manifest that says ``protocol = "mcp"``: the connector that mounts its server.

The manifest loader imports this module the first time a manifest names the protocol,
so only a process that mounts an MCP server loads the orchestrator's links with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import partial

from mesh._orchestrator.links import PROTOCOL_ADAPTERS
from mesh._orchestrator.spec import AgentSpec
from mesh._rpc.connect import DEFAULT_CONNECT_TIMEOUT
from mesh.manifests import HttpSection, Manifest
from mesh.mcp._http import open_mcp_http_client
from mesh.mcp._link import mcp_connector
from mesh.mcp._mount import Revision
from mesh.mcp._oauth import oauth_settings
from transports import Connector

__all__: list[str] = []


def _mount_manifest(
    manifest: Manifest, spec: AgentSpec, environ: Mapping[str, str] | None
) -> Connector:
    """The connector for a manifest with ``protocol = "mcp"``."""
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
