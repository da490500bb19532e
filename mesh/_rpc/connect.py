"""Opening a :class:`~mesh.Peer` to an agent in one step, per transport.

Each ``open_*`` dials, starts the session and runs the ``agent/info`` handshake
under :func:`~mesh._rpc.boundary.map_transport_errors`, so a failure to connect is
always a :class:`~mesh.MeshError`: :class:`~mesh.ConnectFailed` (refused,
unreachable, TLS, missing command, died while starting), :class:`~mesh.Unauthorized`
(token refused) or :class:`~mesh.CallTimeout` (no answer in ``connect_timeout``).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, Final

from mesh._errors import CallTimeout, MethodNotFound
from mesh._rpc.boundary import map_transport_errors
from mesh._rpc.peer import Peer, RequestHandler, open_peer
from mesh._rpc.session import SessionConfig
from mesh._telemetry.tracing import environment as trace_environment
from mesh.protocol import RequestId, new_request_id
from transports import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameStream,
    WebSocketConfig,
    open_http_client,
    open_stdio_process,
    open_websocket,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "INFO_OFFER",
    "handshake",
    "handshake_request",
    "link_websocket_config",
    "open_http_peer",
    "open_stdio_peer",
    "open_websocket_peer",
]

#: The WebSocket handshake's request header that asks ``agent/info`` with the
#: connection itself (its value is the call's id): a server that takes it up echoes it
#: in its 101 response and answers first thing, so the link is up in one round trip.
#: A server that does not know it ignores it, and the client asks after opening.
INFO_OFFER: Final = "Mesh-Agent-Info"

#: Starting a Python agent takes a few hundred milliseconds; ten seconds allows
#: for a loaded machine without letting a wedged start-up hang the caller.
DEFAULT_CONNECT_TIMEOUT: Final = 10.0


def link_websocket_config(config: SessionConfig, **settings: Any) -> WebSocketConfig:
    """The WebSocket settings of a mesh link: the session's heartbeats are its keepalive.

    A peer beats every ``heartbeat_interval`` and drops the link after
    ``heartbeat_ttl`` of silence: what WebSocket pings would find, found by the
    peer's own clock. So the link pings only when heartbeats are off, and holds
    no keepalive task of its own (memory per idle link, docs/performance.md).
    """
    if config.heartbeat_interval is not None:
        settings.setdefault("ping_interval", None)
    return WebSocketConfig(max_frame_size=config.max_frame_size, **settings)


def handshake_request(stream: FrameStream) -> tuple[RequestId, str] | None:
    """The ``agent/info`` call a client made in its WebSocket handshake, for ``serve_peer``."""
    asked = getattr(stream, "offers", {}).get(INFO_OFFER.lower())
    return None if asked is None else (RequestId(asked), "agent/info")


async def handshake(
    peer: Peer, *, timeout: float, asked: RequestId | None = None
) -> dict[str, Any]:
    """Ask the new peer who it is (``agent/info``); proves it is up and speaking the protocol.

    ``asked``: the id of the call the connection's handshake already made (its
    answer is then awaited, not asked for). A peer that answers ``agent/info``
    with "method not found" is alive all the same; its info is then empty.
    """
    try:
        if asked is None:
            info = await peer.call("agent/info", timeout=timeout)
        else:
            info = await peer.wait_handshake_answer("agent/info", asked, timeout=timeout)
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


def open_stdio_peer(
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
) -> AbstractAsyncContextManager[Peer]:
    """Spawn an agent program and talk to it over its stdin/stdout.

    Returns once the agent has answered ``agent/info`` (see :func:`handshake`).
    A command that does not exist or cannot run, or an agent that dies while
    starting, raises :class:`~mesh.ConnectFailed` (with the exit status and last
    stderr lines when it ran). ``agent`` names it in errors (default: the
    command's file name).
    """
    max_frame_size = config.max_frame_size if config else DEFAULT_MAX_FRAME_SIZE
    # The child continues the caller's trace (TRACEPARENT), whatever else it inherits.
    env = {**(env or {}), **trace_environment()}
    name = agent or os.path.basename(command)
    dial = open_stdio_process(
        command,
        args,
        env=env,
        inherit_env=inherit_env,
        cwd=cwd,
        max_frame_size=max_frame_size,
        agent=name,
    )
    return _open(dial, "stdio", name, config, handler, connect_timeout)


def open_http_peer(
    endpoint: str,
    *,
    agent: str | None = None,
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
) -> AbstractAsyncContextManager[Peer]:
    """Talk to an agent served over HTTP (``POST {endpoint}/rpc``).

    An unreachable server or a certificate that does not verify raises
    :class:`~mesh.ConnectFailed`; a refused token (401/403), :class:`~mesh.Unauthorized`.
    """
    config = config or SessionConfig()
    dial = open_http_client(
        endpoint, token=token, ssl_context=ssl_context, max_frame_size=config.max_frame_size
    )
    return _open(dial, "http", agent or endpoint, config, None, connect_timeout)


def open_websocket_peer(
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
) -> AbstractAsyncContextManager[Peer]:
    """Dial an agent's WebSocket endpoint with its token.

    ``agent/info`` is asked in the WebSocket handshake (``INFO_OFFER``): a server
    that takes it up answers it first thing, so the link is up in one round
    trip; with one that does not, it is asked once the link is open.

    A refused or unreachable dial, or a certificate that does not verify, raises
    :class:`~mesh.ConnectFailed`; a refused token (close 4001/4003),
    :class:`~mesh.Unauthorized` with its ``close_code``.
    """
    config = config or SessionConfig()
    ws_config = websocket_config or link_websocket_config(config, connect_timeout=connect_timeout)
    asked = new_request_id()
    dial = open_websocket(
        url,
        token=token,
        headers=headers,
        offers=[(INFO_OFFER, asked)],
        ssl_context=ssl_context,
        config=ws_config,
    )
    return _open(dial, "websocket", agent or url, config, handler, connect_timeout, asked)


@asynccontextmanager
async def _open(
    dial: AbstractAsyncContextManager[FrameStream],
    transport: str,
    agent: str,
    config: SessionConfig | None,
    handler: RequestHandler | None,
    connect_timeout: float,
    asked: RequestId | None = None,
) -> AsyncIterator[Peer]:
    """Dial, start the session and handshake, translating any failure; then hand the peer out.

    The translation covers the opening only (an exit stack, not nested ``async
    with``, so the caller's body runs outside it).
    """
    async with AsyncExitStack() as stack:
        with map_transport_errors(agent=agent, transport=transport):
            stream = await stack.enter_async_context(dial)
            peer = await stack.enter_async_context(
                open_peer(stream, handler=handler, config=config, agent=agent)
            )
            taken = asked is not None and getattr(stream, "offers", {}).get(INFO_OFFER.lower())
            await handshake(peer, timeout=connect_timeout, asked=asked if taken else None)
        yield peer
