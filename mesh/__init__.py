"""agent-mesh: agents talking to agents.

RPC correlated by id over stdio, HTTP and WebSocket, with deadlines, cancellation,
progress and heartbeats; an SDK for writing agents; a registry, an orchestrator,
a daemon and conversation rooms built on top. The wire types are in
:mod:`mesh.protocol`; manifests in :mod:`mesh.manifests`; rooms in :mod:`mesh.rooms`;
MCP both ways (mount MCP servers, serve agents to MCP clients) in :mod:`mesh.mcp`.

``import mesh`` is cheap: the errors load at once and every other public name on
first use (a module ``__getattr__``), so a command or a script that needs one part
does not pay for the daemon's wings (MCP, A2A, rooms, providers, the orchestrator).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mesh._errors import (
    AgentUnavailable,
    CallTimeout,
    ConnectFailed,
    ConnectionLost,
    ErrorCode,
    Forbidden,
    InvalidParams,
    MeshError,
    MessageTooLarge,
    MethodNotFound,
    ProtocolError,
    RemoteError,
    ToolError,
    Unauthorized,
)
from mesh._public import defer_httpx_cli, publish

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each loads on first use
    from mesh._orchestrator.access import EMBEDDER, Principal
    from mesh._orchestrator.bound import BoundCaller
    from mesh._orchestrator.orchestrator import MeshOrchestrator
    from mesh._orchestrator.spec import AgentSpec, Outcome, local_connector
    from mesh._rpc.asks import Elicited, Sampled
    from mesh._rpc.caller import Caller, CallOptions
    from mesh._rpc.connect import open_http_peer, open_stdio_peer, open_websocket_peer
    from mesh._rpc.peer import Peer, RequestContext, RequestHandler, open_peer, serve_peer
    from mesh._rpc.reconnect import (
        ConnectionEvent,
        ReconnectingPeer,
        ReconnectPolicy,
        open_reconnecting_peer,
    )
    from mesh._rpc.session import SessionConfig, SessionStatistics
    from mesh._sdk.agent import Agent, CompletionArgument, CompletionRef, Tool
    from mesh._sdk.runner import run_agent
    from mesh._sdk.serve import open_agent_server
    from mesh.manifests import (
        DialInSection,
        HttpSection,
        Manifest,
        ManifestError,
        ManifestSet,
        Persona,
        StdioSection,
        WebSocketSection,
        load_manifest,
        load_manifests,
    )
    from mesh.rooms import (
        InvalidRoomSpec,
        MessageEvent,
        Room,
        RoomConflict,
        RoomError,
        RoomEvent,
        RoomManager,
        RoomNotFound,
        RoomSnapshot,
        RoomSpec,
        RoomStatus,
        StopReason,
        TurnReply,
        TurnRequest,
    )

__version__ = "0.1.0"

#: Where each public name not loaded at once lives, by module: imported on first use.
_LAZY: dict[str, tuple[str, ...]] = {
    "mesh._orchestrator.access": ("EMBEDDER", "Principal"),
    "mesh._orchestrator.bound": ("BoundCaller",),
    "mesh._orchestrator.orchestrator": ("MeshOrchestrator",),
    "mesh._orchestrator.spec": (
        "AgentSpec",
        "Outcome",
        "local_connector",
    ),
    "mesh._rpc.asks": (
        "Elicited",
        "Sampled",
    ),
    "mesh._rpc.caller": (
        "Caller",
        "CallOptions",
    ),
    "mesh._rpc.connect": (
        "open_http_peer",
        "open_stdio_peer",
        "open_websocket_peer",
    ),
    "mesh._rpc.peer": (
        "Peer",
        "RequestContext",
        "RequestHandler",
        "open_peer",
        "serve_peer",
    ),
    "mesh._rpc.reconnect": (
        "ConnectionEvent",
        "ReconnectingPeer",
        "ReconnectPolicy",
        "open_reconnecting_peer",
    ),
    "mesh._rpc.session": (
        "SessionConfig",
        "SessionStatistics",
    ),
    "mesh._sdk.agent": (
        "Agent",
        "CompletionArgument",
        "CompletionRef",
        "Tool",
    ),
    "mesh._sdk.runner": ("run_agent",),
    "mesh._sdk.serve": ("open_agent_server",),
    "mesh.manifests": (
        "DialInSection",
        "HttpSection",
        "Manifest",
        "ManifestError",
        "ManifestSet",
        "Persona",
        "StdioSection",
        "WebSocketSection",
        "load_manifest",
        "load_manifests",
    ),
    "mesh.rooms": (
        "InvalidRoomSpec",
        "MessageEvent",
        "Room",
        "RoomConflict",
        "RoomError",
        "RoomEvent",
        "RoomManager",
        "RoomNotFound",
        "RoomSnapshot",
        "RoomSpec",
        "RoomStatus",
        "StopReason",
        "TurnReply",
        "TurnRequest",
    ),
}
_WHERE: dict[str, str] = {name: module for module, names in _LAZY.items() for name in names}
#: Subpackages reachable as attributes (``mesh.mcp``) without their own import statement.
_SUBPACKAGES = frozenset(
    ("a2a", "cluster", "daemon", "manifests", "mcp", "protocol", "providers", "rooms", "testing")
)

__all__ = [
    "EMBEDDER",
    "Agent",
    "AgentSpec",
    "AgentUnavailable",
    "BoundCaller",
    "CallOptions",
    "CallTimeout",
    "Caller",
    "CompletionArgument",
    "CompletionRef",
    "ConnectFailed",
    "ConnectionEvent",
    "ConnectionLost",
    "DialInSection",
    "Elicited",
    "ErrorCode",
    "Forbidden",
    "HttpSection",
    "InvalidParams",
    "InvalidRoomSpec",
    "Manifest",
    "ManifestError",
    "ManifestSet",
    "MeshError",
    "MeshOrchestrator",
    "MessageEvent",
    "MessageTooLarge",
    "MethodNotFound",
    "Outcome",
    "Peer",
    "Persona",
    "Principal",
    "ProtocolError",
    "ReconnectPolicy",
    "ReconnectingPeer",
    "RemoteError",
    "RequestContext",
    "RequestHandler",
    "Room",
    "RoomConflict",
    "RoomError",
    "RoomEvent",
    "RoomManager",
    "RoomNotFound",
    "RoomSnapshot",
    "RoomSpec",
    "RoomStatus",
    "Sampled",
    "SessionConfig",
    "SessionStatistics",
    "StdioSection",
    "StopReason",
    "Tool",
    "ToolError",
    "TurnReply",
    "TurnRequest",
    "Unauthorized",
    "WebSocketSection",
    "__version__",
    "load_manifest",
    "load_manifests",
    "local_connector",
    "open_agent_server",
    "open_http_peer",
    "open_peer",
    "open_reconnecting_peer",
    "open_stdio_peer",
    "open_websocket_peer",
    "run_agent",
    "serve_peer",
]


def __getattr__(name: str) -> Any:
    """Load a public name (or a subpackage) on first use, and keep it here."""
    module = _WHERE.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        publish(globals(), [name])
        return value
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})


publish(globals(), [name for name in __all__ if name not in _WHERE])
# Every module of the library that imports httpx imports this package first.
defer_httpx_cli()
