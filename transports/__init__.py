"""Frame transports for agent-mesh: memory, stdio, HTTP and WebSocket.

A transport moves frames (one message's bytes) and nothing else: no RPC, no
JSON, no retries. It imports nothing from ``mesh`` or ``registry``.
"""

from transports._auth import TokenAuthenticator, bearer_challenge, bearer_token, protocol_token
from transports._base import (
    DEFAULT_MAX_FRAME_SIZE,
    Connector,
    FrameRejected,
    FrameStream,
    FrameTooLarge,
    TransportClosed,
    TransportError,
    TransportInfo,
)
from transports._groups import unwrap_single_error
from transports._http_client import HttpClientStream, open_http_client
from transports._http_messages import BodyWriter, HttpRequest, HttpResponse
from transports._http_server import (
    HttpServer,
    HttpServerConfig,
    UpgradeHandler,
    open_http_server,
)
from transports._memory import MemoryFrameStream, memory_stream_pair
from transports._stdio import StdioProcessStream, open_stdio_process, open_stdio_server
from transports._websocket import (
    CloseCode,
    ConnectFailed,
    WebSocketConfig,
    WebSocketStream,
    open_websocket,
    websocket_upgrade_handler,
)

__all__ = [
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
    "open_http_client",
    "open_http_server",
    "open_stdio_process",
    "open_stdio_server",
    "open_websocket",
    "protocol_token",
    "unwrap_single_error",
    "websocket_upgrade_handler",
]


# Reprs and tracebacks name the public package, not the private module (as httpx does).
for _name in __all__:
    _obj = globals()[_name]
    if "._" in getattr(_obj, "__module__", ""):
        _obj.__module__ = __name__
del _name, _obj
