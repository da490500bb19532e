"""Frame transports for agent-mesh: memory, stdio, HTTP and WebSocket.

A transport moves frames (one message's bytes) and nothing else: no RPC, no
JSON, no retries. It imports nothing from ``mesh`` or ``registry``.
"""

from transports._base import (
    DEFAULT_MAX_FRAME_SIZE,
    Connector,
    FrameHandler,
    FrameStream,
    FrameTooLarge,
    Listener,
    TransportClosed,
    TransportError,
    TransportInfo,
)
from transports._memory import MemoryFrameStream, memory_stream_pair
from transports._stdio import StdioProcessStream, open_stdio_process, open_stdio_server

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "Connector",
    "FrameHandler",
    "FrameStream",
    "FrameTooLarge",
    "Listener",
    "MemoryFrameStream",
    "StdioProcessStream",
    "TransportClosed",
    "TransportError",
    "TransportInfo",
    "memory_stream_pair",
    "open_stdio_process",
    "open_stdio_server",
]
