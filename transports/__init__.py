"""Frame transports for agent-mesh: memory, stdio, HTTP and WebSocket.

A transport moves frames (one message's bytes) and nothing else: no RPC, no
JSON, no retries. It imports nothing from ``mesh`` or ``registry``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
    from transports._auth import TokenAuthenticator, bearer_challenge, bearer_token, protocol_token
    from transports._base import (
        DEFAULT_MAX_FRAME_SIZE,
        CloseCode,
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

#: Where each public name lives: imported on first use, so a process that uses one transport
#: (an agent on stdio) does not import the others (websockets, h11, httpx).
_WHERE: dict[str, str] = {
    "TokenAuthenticator": "transports._auth",
    "bearer_challenge": "transports._auth",
    "bearer_token": "transports._auth",
    "protocol_token": "transports._auth",
    "DEFAULT_MAX_FRAME_SIZE": "transports._base",
    "CloseCode": "transports._base",
    "Connector": "transports._base",
    "FrameRejected": "transports._base",
    "FrameStream": "transports._base",
    "FrameTooLarge": "transports._base",
    "TransportClosed": "transports._base",
    "TransportError": "transports._base",
    "TransportInfo": "transports._base",
    "unwrap_single_error": "transports._groups",
    "HttpClientStream": "transports._http_client",
    "open_http_client": "transports._http_client",
    "BodyWriter": "transports._http_messages",
    "HttpRequest": "transports._http_messages",
    "HttpResponse": "transports._http_messages",
    "HttpServer": "transports._http_server",
    "HttpServerConfig": "transports._http_server",
    "UpgradeHandler": "transports._http_server",
    "open_http_server": "transports._http_server",
    "MemoryFrameStream": "transports._memory",
    "memory_stream_pair": "transports._memory",
    "StdioProcessStream": "transports._stdio",
    "open_stdio_process": "transports._stdio",
    "open_stdio_server": "transports._stdio",
    "ConnectFailed": "transports._websocket",
    "WebSocketConfig": "transports._websocket",
    "WebSocketStream": "transports._websocket",
    "open_websocket": "transports._websocket",
    "websocket_upgrade_handler": "transports._websocket",
}


def __getattr__(name: str) -> Any:
    """Load a public name on first use; its repr names this package, not the private module
    (as httpx does)."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    if "._" in getattr(value, "__module__", ""):
        value.__module__ = __name__
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
