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
    "BoundCaller",
    "EMBEDDER",
    "CallTimeout",
    "CallOptions",
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
}

#: Packages whose exports must name themselves, not a private module, in reprs.
PUBLIC_PACKAGES = (
    "mesh",
    "mesh.protocol",
    "mesh.content",
    "mesh.manifests",
    "mesh.rooms",
    "mesh.providers",
    "mesh.daemon",
    "mesh.mcp",
    "mesh.a2a",
    "mesh.cluster",
    "mesh.testing",
    "mesh.demo.fixtures",
    "transports",
    "registry",
)


#: Every other public package's names, pinned: a change here is a change users see.
PINNED: dict[str, set[str]] = {
    "mesh.cli": {"main"},
    "mesh.content": {
        "Audio",
        "CONTENT_KEY",
        "EmbeddedResource",
        "Image",
        "Item",
        "MAX_ITEM_BYTES",
        "PromptMessage",
        "ResourceLink",
        "STRUCTURED_KEY",
        "Text",
        "ToolResult",
        "decode",
    },
    "mesh.protocol": {
        "Codec",
        "DecodeFailure",
        "ErrorInfo",
        "Heartbeat",
        "HeartbeatPayload",
        "MESH_CODEC",
        "MeshCodec",
        "Message",
        "Notification",
        "NotificationPayload",
        "Request",
        "RequestId",
        "RequestPayload",
        "Response",
        "ResponsePayload",
        "new_request_id",
        "now_ms",
        "salvage_id",
    },
    "mesh.manifests": {
        "AccessSection",
        "DialInSection",
        "HttpSection",
        "Manifest",
        "ManifestError",
        "ManifestSet",
        "Persona",
        "StdioSection",
        "TransportSection",
        "ValidateExit",
        "WebSocketSection",
        "load_manifest",
        "load_manifests",
        "validate_manifests",
    },
    "mesh.rooms": {
        "AgentJoinedEvent",
        "AgentLeftEvent",
        "AnswerEvent",
        "Awareness",
        "DEFAULT_MAX_TURNS",
        "DEFAULT_OBSERVER_BUFFER",
        "DeltaEvent",
        "Describe",
        "EVENT_TYPES",
        "ErrorEvent",
        "ExitRules",
        "InvalidRoomSpec",
        "Limits",
        "LiveEvent",
        "Member",
        "MemberKind",
        "MessageEvent",
        "Mode",
        "ObserverTooSlow",
        "People",
        "PersonaInfo",
        "PointEvent",
        "Presence",
        "QuestionEvent",
        "ROLE_PROMPTS",
        "ROOM_PERSONA",
        "ROOM_TURN",
        "ResumedEvent",
        "Room",
        "RoomConflict",
        "RoomError",
        "RoomEvent",
        "RoomEvents",
        "RoomId",
        "RoomManager",
        "RoomNotFound",
        "RoomSnapshot",
        "RoomSpec",
        "RoomStatus",
        "Speak",
        "Step",
        "StopReason",
        "StoppedEvent",
        "TurnReply",
        "TurnRequest",
        "WelcomeEvent",
        "build_turn_request",
        "decode_event",
        "decode_live_event",
        "decode_room_spec",
        "encode_event",
        "format_event",
        "perspective_messages",
        "report_delta",
        "role_persona",
        "system_prompt",
        "transcript_markdown",
    },
    "mesh.providers": {
        "AnthropicProvider",
        "ChatMessage",
        "Completion",
        "GeminiProvider",
        "HttpProvider",
        "OllamaProvider",
        "OpenAIProvider",
        "Provider",
        "ProviderAuthError",
        "ProviderConfig",
        "ProviderError",
        "ProviderName",
        "ProviderRateLimited",
        "ProviderResponseError",
        "ProviderStatusError",
        "ProviderStreamCut",
        "ProviderTimeout",
        "ProviderUnreachable",
        "RetryPolicy",
        "Role",
        "ScriptedCall",
        "ScriptedProvider",
        "Usage",
        "backoff_schedule",
        "create_provider",
        "open_provider",
        "parse_retry_after",
    },
    "mesh.daemon": {
        "DaemonSettings",
        "ListenError",
        "SettingsError",
        "load_settings",
        "serve_daemon",
    },
    "mesh.mcp": {
        "ExtraTool",
        "HANDSHAKE_REVISIONS",
        "MCP_CODEC",
        "MODERN",
        "McpCodec",
        "McpHttpStream",
        "McpMount",
        "McpServer",
        "MountStream",
        "REVISIONS",
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
    },
    "mesh.a2a": {
        "A2aClient",
        "A2aError",
        "A2aMount",
        "A2aServer",
        "Caller",
        "StoreFull",
        "Task",
        "TaskStore",
        "a2a_connector",
        "build_card",
        "open_a2a_mount",
    },
    "mesh.cluster": {
        "Cluster",
        "ClusterError",
        "ClusterRegistry",
        "ClusterSettings",
        "HOLDER",
        "open_cluster",
    },
    "mesh.testing": {
        "Daemon",
        "DaemonClient",
        "DialInEcho",
        "EchoServer",
        "KillableConnector",
        "NatsServer",
        "NotificationRecorder",
        "SPAWN_TIMEOUT",
        "echo_agent_command",
        "nats_server_binary",
        "open_daemon_client",
        "open_dial_in_echo_agent",
        "open_echo_agent",
        "open_memory_peer",
        "spawn_daemon",
        "spawn_dial_in_echo",
        "spawn_echo_server",
        "spawn_nats_server",
    },
    "registry": {
        "AgentId",
        "AgentRecord",
        "AgentStatus",
        "ChangeKind",
        "DEFAULT_GRACE",
        "DEFAULT_INTERVAL",
        "DEFAULT_SUBSCRIBER_BUFFER",
        "InvalidAgentRecord",
        "Listener",
        "Registry",
        "RegistryError",
        "RegistryStatistics",
        "StatusChange",
        "SubscriberOverflow",
        "Subscription",
        "TTL_FACTOR",
        "UnknownAgent",
        "run_expiry",
    },
    "mesh.demo.fixtures": {
        "DEMO_TOPIC",
        "REVIEW_TASK",
        "ScriptedSeat",
        "demo_chat",
        "demo_review",
        "scripted",
    },
}


#: How many public names each package may export. A package grows by raising its number
#: here, in the same change that adds the name, so growth is a decision and not a drift;
#: when names go, lower the number with them.
BUDGET: dict[str, int] = {
    "mesh": 70,
    "mesh.a2a": 11,
    "mesh.cli": 1,
    "mesh.content": 12,
    "mesh.cluster": 6,
    "mesh.daemon": 5,
    "mesh.demo.fixtures": 6,
    "mesh.manifests": 14,
    "mesh.mcp": 20,
    "mesh.protocol": 18,
    "mesh.providers": 27,
    "mesh.rooms": 57,
    "mesh.testing": 18,
    "registry": 18,
    "transports": 33,
    "transports.testing": 5,
}


@pytest.mark.parametrize("package", sorted(BUDGET))
def test_package_stays_within_its_budget(package: str) -> None:
    exported = len(importlib.import_module(package).__all__)
    budget = BUDGET[package]
    assert exported <= budget, (
        f"{package} exports {exported} public names, over its budget of {budget}"
    )


def test_every_public_package_has_a_budget() -> None:
    assert set(PINNED) | set(PUBLIC_PACKAGES) | {"transports.testing"} <= set(BUDGET)


@pytest.mark.parametrize("package", sorted(PINNED))
def test_package_public_names(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == PINNED[package]
    assert len(module.__all__) == len(PINNED[package]), "a name is listed twice"
    for name in module.__all__:
        assert hasattr(module, name), name


def test_every_public_package_is_pinned() -> None:
    """A new public package (no ``_`` in its path, an ``__all__``) gets a pin above."""
    import pkgutil

    found = set()
    for top in (mesh, transports):
        for info in pkgutil.walk_packages(top.__path__, f"{top.__name__}."):
            public = not any(part.startswith("_") for part in info.name.split("."))
            if info.ispkg and public and hasattr(importlib.import_module(info.name), "__all__"):
                found.add(info.name)
    assert found - set(PINNED) - {"transports.testing"} == set()


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
        "BodyWriter",
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
        "bearer_challenge",
        "bearer_token",
        "memory_stream_pair",
        "protocol_token",
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
