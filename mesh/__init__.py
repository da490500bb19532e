"""agent-mesh: agents talking to agents.

RPC correlated by id over stdio, HTTP and WebSocket, with deadlines, cancellation,
progress and heartbeats; an SDK for writing agents; a registry, an orchestrator,
a daemon and conversation rooms built on top.
"""

from mesh._agent import Agent, Tool
from mesh._connect import connect_http, connect_stdio, connect_websocket
from mesh._errors import (
    AgentUnavailable,
    CallTimeout,
    ConnectionLost,
    ErrorCode,
    InvalidParams,
    MeshError,
    MessageTooLarge,
    MethodNotFound,
    ProtocolError,
    RemoteError,
    ToolError,
    Unauthorized,
)
from mesh._manifest import (
    DialInTransport,
    HttpTransport,
    Manifest,
    ManifestError,
    ManifestSet,
    Persona,
    StdioTransport,
    WebSocketTransport,
    load_manifest,
    load_manifests,
)
from mesh._orchestrator import AgentSpec, MeshOrchestrator, Outcome, local_connector
from mesh._peer import Peer, RequestContext, RequestHandler, open_peer, serve_peer
from mesh._protocol import (
    MESH_CODEC,
    Codec,
    ErrorInfo,
    Heartbeat,
    MeshCodec,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
)
from mesh._reconnect import (
    ConnectionEvent,
    ReconnectingPeer,
    ReconnectPolicy,
    open_reconnecting_peer,
)
from mesh._runner import run_agent
from mesh._serve import open_agent_server
from mesh._session import SessionConfig, SessionStatistics

__version__ = "0.1.0"

__all__ = [
    "MESH_CODEC",
    "Agent",
    "AgentSpec",
    "AgentUnavailable",
    "CallTimeout",
    "Codec",
    "ConnectionEvent",
    "ConnectionLost",
    "DialInTransport",
    "ErrorCode",
    "ErrorInfo",
    "Heartbeat",
    "HttpTransport",
    "InvalidParams",
    "Manifest",
    "ManifestError",
    "ManifestSet",
    "MeshCodec",
    "MeshError",
    "MeshOrchestrator",
    "Message",
    "MessageTooLarge",
    "MethodNotFound",
    "Notification",
    "Outcome",
    "Peer",
    "Persona",
    "ProtocolError",
    "ReconnectPolicy",
    "ReconnectingPeer",
    "RemoteError",
    "Request",
    "RequestContext",
    "RequestHandler",
    "RequestId",
    "Response",
    "SessionConfig",
    "SessionStatistics",
    "StdioTransport",
    "Tool",
    "ToolError",
    "Unauthorized",
    "WebSocketTransport",
    "__version__",
    "connect_http",
    "connect_stdio",
    "connect_websocket",
    "load_manifest",
    "load_manifests",
    "local_connector",
    "open_agent_server",
    "open_peer",
    "open_reconnecting_peer",
    "run_agent",
    "serve_peer",
]
