"""The public surface is deliberate: a change here is a change users see."""

from __future__ import annotations

import importlib
import types

import pytest

import mesh
import mesh.protocol
import transports
import transports.testing

MESH = {
    "Agent",
    "AgentSpec",
    "AgentUnavailable",
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
}

#: Packages whose exports must name themselves, not a private module, in reprs.
PUBLIC_PACKAGES = (
    "mesh",
    "mesh.protocol",
    "mesh.manifests",
    "mesh.rooms",
    "mesh.providers",
    "mesh.daemon",
    "mesh.mcp",
    "mesh.cluster",
    "transports",
    "registry",
)


def test_mesh_public_names() -> None:
    assert set(mesh.__all__) == MESH
    assert len(mesh.__all__) == len(MESH), "a name is listed twice"
    for name in mesh.__all__:
        assert hasattr(mesh, name), name


def test_wire_types_live_in_mesh_protocol_not_at_the_top() -> None:
    assert {"Request", "Response", "Message", "Notification", "MESH_CODEC"} <= set(
        mesh.protocol.__all__
    )
    assert not {"Request", "Response", "Message"} & set(mesh.__all__)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_exports_carry_a_public_module(package: str) -> None:
    module = importlib.import_module(package)
    private = {}
    for name in module.__all__:
        obj = getattr(module, name)
        where = str(getattr(obj, "__module__", ""))
        named = isinstance(obj, type | types.FunctionType)
        if named and any(part.startswith("_") for part in where.split(".")):
            private[name] = where
    assert private == {}
    assert repr(mesh.Peer) == "<class 'mesh.Peer'>"


def test_transports_public_names() -> None:
    assert set(transports.__all__) == {
        "DEFAULT_MAX_FRAME_SIZE",
        "CloseCode",
        "ConnectFailed",
        "Connector",
        "FrameRejected",
        "FrameStream",
        "FrameTooLarge",
        "HttpClientStream",
        "HttpRequest",
        "HttpResponse",
        "HttpServer",
        "HttpServerConfig",
        "MemoryFrameStream",
        "StdioProcessStream",
        "TokenAuthenticator",
        "TransportClosed",
        "TransportError",
        "TransportInfo",
        "UpgradeHandler",
        "WebSocketConfig",
        "WebSocketStream",
        "bearer_token",
        "memory_stream_pair",
        "open_http_client",
        "open_http_server",
        "open_stdio_process",
        "open_stdio_server",
        "open_websocket",
        "unwrap_single_error",
        "websocket_upgrade_handler",
    }
    assert len(transports.__all__) == len(set(transports.__all__))
    for name in transports.__all__:
        assert hasattr(transports, name), name


def test_transports_testing_public_names() -> None:
    assert set(transports.testing.__all__) == {
        "CHECK_TIMEOUT",
        "MIN_FRAME_SIZE",
        "PairFactory",
        "check_frame_stream",
        "check_request_reply_stream",
    }


def test_error_tree() -> None:
    for cls in (
        mesh.RemoteError,
        mesh.CallTimeout,
        mesh.ConnectionLost,
        mesh.AgentUnavailable,
        mesh.Unauthorized,
        mesh.Forbidden,
        mesh.MessageTooLarge,
        mesh.ProtocolError,
    ):
        assert issubclass(cls, mesh.MeshError)
    for cls in (mesh.ToolError, mesh.MethodNotFound, mesh.InvalidParams):
        assert issubclass(cls, mesh.RemoteError)
    assert issubclass(mesh.CallTimeout, TimeoutError)
