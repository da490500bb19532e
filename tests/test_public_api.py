"""The public surface is deliberate: a change here is a change users see."""

from __future__ import annotations

import mesh
import transports


def test_mesh_public_names() -> None:
    assert set(mesh.__all__) >= {
        "Agent",
        "Caller",
        "Peer",
        "RequestContext",
        "open_peer",
        "serve_peer",
        "open_stdio_peer",
        "run_agent",
        "SessionConfig",
        "MeshError",
        "RemoteError",
        "ToolError",
        "MethodNotFound",
        "InvalidParams",
        "CallTimeout",
        "ConnectionLost",
        "AgentUnavailable",
        "Unauthorized",
        "MessageTooLarge",
        "ProtocolError",
        "ErrorCode",
    }
    for name in mesh.__all__:
        assert hasattr(mesh, name), name
    assert not [name for name in mesh.__all__ if name.startswith("_") and name != "__version__"]


def test_transports_public_names() -> None:
    assert set(transports.__all__) >= {
        "FrameStream",
        "TransportClosed",
        "FrameTooLarge",
        "TransportInfo",
        "memory_stream_pair",
        "open_stdio_process",
        "open_stdio_server",
        "DEFAULT_MAX_FRAME_SIZE",
    }
    for name in transports.__all__:
        assert hasattr(transports, name), name


def test_error_tree() -> None:
    for cls in (
        mesh.RemoteError,
        mesh.CallTimeout,
        mesh.ConnectionLost,
        mesh.AgentUnavailable,
        mesh.Unauthorized,
        mesh.MessageTooLarge,
        mesh.ProtocolError,
    ):
        assert issubclass(cls, mesh.MeshError)
    for cls in (mesh.ToolError, mesh.MethodNotFound, mesh.InvalidParams):
        assert issubclass(cls, mesh.RemoteError)
    assert issubclass(mesh.CallTimeout, TimeoutError)
