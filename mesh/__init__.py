"""agent-mesh: agents talking to agents.

RPC correlated by id over stdio, HTTP and WebSocket, with deadlines, cancellation,
progress and heartbeats; an SDK for writing agents; a registry, an orchestrator,
a daemon and conversation rooms built on top. The wire types are in
:mod:`mesh.protocol`; manifests in :mod:`mesh.manifests`; rooms in :mod:`mesh.rooms`;
MCP both ways (mount MCP servers, serve agents to MCP clients) in :mod:`mesh.mcp`.
"""

# Imported for its effect too: mesh.mcp registers the manifests' `protocol = "mcp"`.
from mesh import mcp as mcp

# Likewise mesh.a2a registers `protocol = "a2a"` (docs/a2a.md).
from mesh import a2a as a2a  # isort: skip
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
from mesh._orchestrator.access import Principal
from mesh._orchestrator.orchestrator import MeshOrchestrator
from mesh._orchestrator.spec import AgentSpec, Outcome, local_connector
from mesh._public import publish
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
from mesh._sdk.agent import Agent, Tool
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

__all__ = [
    "Agent",
    "AgentSpec",
    "AgentUnavailable",
    "CallOptions",
    "CallTimeout",
    "Caller",
    "ConnectFailed",
    "ConnectionEvent",
    "ConnectionLost",
    "DialInSection",
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

publish(globals(), __all__)
