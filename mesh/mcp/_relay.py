"""``mesh mcp``: an MCP host's stdio, relayed frame for frame to a running daemon.

An MCP host launches ``mesh mcp`` as a command and speaks MCP on its stdin and
stdout; we open one WebSocket to the daemon's ``/mcp`` and carry each line there
and each answer back. Nothing is parsed on the way (the daemon's
:class:`~mesh.mcp.McpServer` does that), so the relay adds one hop and no state,
and the link is a stream: list changes reach the host as they happen. A line
over the size limit is answered here with the JSON-RPC error the daemon would
give. Library code never writes to stdout except the frames themselves.
"""

from __future__ import annotations

import ssl
from typing import Final
from urllib.parse import quote, urlsplit, urlunsplit

import anyio
import anyio.abc
import msgspec

from mesh._errors import ConnectionLost, ErrorCode, Unauthorized
from mesh.mcp._codec import salvage_text, to_wire_id
from transports import (
    DEFAULT_MAX_FRAME_SIZE,
    CloseCode,
    ConnectFailed,
    FrameStream,
    FrameTooLarge,
    TransportClosed,
    WebSocketConfig,
    open_stdio_server,
    open_websocket,
)

__all__ = ["mcp_websocket_url", "relay_stdio"]

#: The daemon must accept the WebSocket this fast (it answers in milliseconds when up).
CONNECT_TIMEOUT: Final = 10.0
#: What the daemon may send us: its answers are bounded by its agents' limits (twice
#: the largest, see ToolCatalog.answer_limit), so this only stops a runaway.
FROM_DAEMON_LIMIT: Final = 64 << 20
#: What the host may send: what the daemon's /mcp WebSocket accepts.
MESSAGE_LIMIT: Final = DEFAULT_MAX_FRAME_SIZE


def mcp_websocket_url(daemon_url: str, agent: str | None = None) -> str:
    """``http://host:port`` (the CLI's ``--url``) -> ``ws://host:port/mcp``, or
    ``.../mcp/AGENT`` for one agent's own server."""
    parts = urlsplit(daemon_url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ValueError(f"not a daemon URL: {daemon_url!r} (expected http://host:port)")
    path = parts.path.rstrip("/") + "/mcp" + ("" if agent is None else "/" + quote(agent, safe=""))
    return urlunsplit((scheme, parts.netloc, path, "", ""))


class _Ended(Exception):
    """One side closed; ``daemon`` says which (and its close code, if it gave one)."""

    def __init__(self, daemon: bool, reason: str, close_code: int | None = None) -> None:
        self.daemon = daemon
        self.reason = reason
        self.close_code = close_code
        super().__init__(reason)


_REFUSED: Final = (CloseCode.UNAUTHORIZED, CloseCode.FORBIDDEN)


async def relay_stdio(
    daemon_url: str,
    *,
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    agent: str | None = None,
) -> None:
    """Relay this process's stdin/stdout to the daemon until either side closes.

    Returns when the MCP host closes stdin. Raises :class:`~mesh.Unauthorized`
    when the daemon refuses ``token`` (4001/4003), and :class:`~mesh.ConnectionLost`
    (naming the daemon and why) when it cannot be reached or goes away.
    """
    url = mcp_websocket_url(daemon_url, agent)
    config = WebSocketConfig(connect_timeout=CONNECT_TIMEOUT, max_frame_size=FROM_DAEMON_LIMIT)
    try:
        async with (
            open_websocket(url, token=token, ssl_context=ssl_context, config=config) as daemon,
            open_stdio_server(max_frame_size=MESSAGE_LIMIT) as host,
        ):
            await _relay(host, daemon)
    except ConnectFailed as exc:
        raise ConnectionLost(f"cannot reach the daemon's MCP endpoint: {exc}") from None
    except _Ended as ended:
        if not ended.daemon:
            return  # the host closed stdin: done
        if ended.close_code in _REFUSED:
            raise Unauthorized(f"the daemon at {url} refused the token: {ended.reason}") from None
        raise ConnectionLost(f"the daemon at {url} closed the link: {ended.reason}") from None


async def _relay(host: FrameStream, daemon: FrameStream) -> None:
    """Pump both ways until one side ends; raise how it ended (the daemon's word first)."""
    ended: list[_Ended] = []

    async def pump(source: FrameStream, sink: FrameStream, from_daemon: bool) -> None:
        try:
            await _pump(source, sink, from_daemon)
        except _Ended as end:
            ended.append(end)
            tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump, host, daemon, False)
        tg.start_soon(pump, daemon, host, True)
    raise min(ended, key=lambda end: not end.daemon)


async def _pump(source: FrameStream, sink: FrameStream, from_daemon: bool) -> None:
    while True:
        try:
            frame = await source.receive()
        except FrameTooLarge as exc:
            if not from_daemon:
                await _refuse(host=source, exc=exc)
            continue
        except TransportClosed as exc:
            raise _Ended(from_daemon, exc.describe(), exc.close_code) from None
        if not from_daemon and not _is_utf8(frame):
            # A WebSocket text frame must be UTF-8: the host hears why, and the link lives on.
            await _answer(source, ErrorCode.PARSE_ERROR, "Parse error: the line is not UTF-8")
            continue
        try:
            await sink.send(frame)
        except TransportClosed as exc:
            raise _Ended(not from_daemon, exc.describe(), exc.close_code) from None


async def _refuse(*, host: FrameStream, exc: FrameTooLarge) -> None:
    key, kind = salvage_text(exc.head)
    if kind == "response":
        return  # never answer an answer
    await _answer(host, ErrorCode.TOO_LARGE, str(exc), None if key is None else to_wire_id(key))


async def _answer(host: FrameStream, code: int, message: str, wire_id: object = None) -> None:
    error = {"code": code, "message": message}
    await host.send(msgspec.json.encode({"jsonrpc": "2.0", "id": wire_id, "error": error}))


def _is_utf8(frame: bytes) -> bool:
    try:
        frame.decode()
    except UnicodeDecodeError:
        return False
    return True
