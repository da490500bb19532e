"""The MCP revisions the mesh speaks, and the names each one puts on the wire.

Two eras: the ``initialize`` handshake (2024-11-05 ... 2025-11-25), where a
connection agrees a revision once, and 2026-07-28, where there is no handshake and
every request carries its revision, client info and capabilities in
``params._meta`` (``server/discover`` tells what a server speaks). Over HTTP a
2026-07-28 request also repeats its revision, method and tool name in headers.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Final

__all__ = [
    "CLIENT_CAPABILITIES_KEY",
    "CLIENT_INFO_KEY",
    "HANDSHAKE_REVISIONS",
    "LATEST_HANDSHAKE",
    "MODERN",
    "PROTOCOL_VERSION_KEY",
    "REVISIONS",
    "SERVER_INFO_KEY",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "envelope",
    "is_modern_request",
    "requested_revision",
]

MODERN: Final = "2026-07-28"
#: Oldest first. 2025-06-18 and 2025-11-25 are what today's peers negotiate; the older
#: two are accepted from servers because their tools wire is the same.
HANDSHAKE_REVISIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE: Final = HANDSHAKE_REVISIONS[-1]
REVISIONS: Final = (*HANDSHAKE_REVISIONS, MODERN)

PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY: Final = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"

#: JSON-RPC error code of "I do not speak the revision you asked for" (data names ours).
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022


def _version() -> str:
    try:
        return metadata.version("agent-mesh")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0"


#: Who we are, in ``clientInfo`` and ``serverInfo``.
IMPLEMENTATION: Final = {"name": "agent-mesh", "version": _version()}


def envelope(revision: str = MODERN) -> dict[str, Any]:
    """The ``_meta`` a 2026-07-28 request carries."""
    return {
        PROTOCOL_VERSION_KEY: revision,
        CLIENT_INFO_KEY: IMPLEMENTATION,
        CLIENT_CAPABILITIES_KEY: {},
    }


def requested_revision(params: Any) -> Any:
    """The revision a request's ``_meta`` names (None when it names none)."""
    if not isinstance(params, dict):
        return None
    meta = params.get("_meta")
    return meta.get(PROTOCOL_VERSION_KEY) if isinstance(meta, dict) else None


def is_modern_request(params: Any) -> bool:
    return requested_revision(params) is not None
