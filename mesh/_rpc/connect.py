"""Opening a :class:`~mesh.Peer` to an agent in one step, per transport."""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

from mesh._errors import CallTimeout, MethodNotFound
from mesh._rpc.peer import Peer, RequestHandler, open_peer
from mesh._rpc.session import SessionConfig
from transports import (
    DEFAULT_MAX_FRAME_SIZE,
    WebSocketConfig,
    open_http_client,
    open_stdio_process,
    open_websocket,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "handshake",
    "open_http_peer",
    "open_stdio_peer",
    "open_websocket_peer",
]

#: Starting a Python agent takes a few hundred milliseconds; ten seconds allows
#: for a loaded machine without letting a wedged start-up hang the caller.
DEFAULT_CONNECT_TIMEOUT: Final = 10.0


async def handshake(peer: Peer, *, timeout: float) -> dict[str, Any]:
    """Ask the new peer who it is (``agent/info``); proves it is up and speaking the protocol.

    A peer that answers ``agent/info`` with "method not found" is alive all the
    same; its info is then empty.
    """
    try:
        info = await peer.call("agent/info", timeout=timeout)
    except MethodNotFound:
        return {}
    except CallTimeout as exc:
        raise CallTimeout(
            f"agent did not answer within {timeout:g} s of connecting",
            agent=peer.agent,
            method="agent/info",
            transport=peer.info.kind,
        ) from exc
    peer.remote_info = info if isinstance(info, dict) else {}
    return peer.remote_info


@asynccontextmanager
async def open_stdio_peer(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    inherit_env: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    agent: str | None = None,
    config: SessionConfig | None = None,
    handler: RequestHandler | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
) -> AsyncIterator[Peer]:
    """Spawn an agent program and talk to it over its stdin/stdout.

    Returns once the agent has answered ``agent/info`` (see :func:`handshake`);
    an agent that dies while starting raises :class:`~mesh.ConnectionLost` with
    its exit status and last stderr lines. ``agent`` names it in errors
    (default: the command's file name).
    """
    max_frame_size = config.max_frame_size if config else DEFAULT_MAX_FRAME_SIZE
    async with (
        open_stdio_process(
            command, args, env=env, inherit_env=inherit_env, cwd=cwd, max_frame_size=max_frame_size
        ) as stream,
        open_peer(
            stream, handler=handler, config=config, agent=agent or os.path.basename(command)
        ) as peer,
    ):
        await handshake(peer, timeout=connect_timeout)
        yield peer


@asynccontextmanager
async def open_http_peer(
    endpoint: str,
    *,
    agent: str | None = None,
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
) -> AsyncIterator[Peer]:
    """Talk to an agent served over HTTP (``POST {endpoint}/rpc``)."""
    config = config or SessionConfig()
    async with (
        open_http_client(
            endpoint, token=token, ssl_context=ssl_context, max_frame_size=config.max_frame_size
        ) as stream,
        open_peer(stream, config=config, agent=agent or endpoint) as peer,
    ):
        await handshake(peer, timeout=connect_timeout)
        yield peer


@asynccontextmanager
async def open_websocket_peer(
    url: str,
    *,
    agent: str | None = None,
    token: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig | None = None,
    websocket_config: WebSocketConfig | None = None,
    handler: RequestHandler | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
) -> AsyncIterator[Peer]:
    """Dial an agent's WebSocket endpoint with its token."""
    config = config or SessionConfig()
    ws_config = websocket_config or WebSocketConfig(
        max_frame_size=config.max_frame_size, connect_timeout=connect_timeout
    )
    async with (
        open_websocket(
            url, token=token, headers=headers, ssl_context=ssl_context, config=ws_config
        ) as stream,
        open_peer(stream, config=config, agent=agent or url, handler=handler) as peer,
    ):
        await handshake(peer, timeout=connect_timeout)
        yield peer
