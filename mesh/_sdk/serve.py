"""Serving an agent on the network: HTTP and WebSocket on one port.

``POST /rpc`` takes one message and answers with one (204 for notifications),
``GET /health`` says the agent is up, and ``/ws`` accepts WebSocket links that
are served like any other stream. With tokens configured, both ``/rpc`` and
``/ws`` require ``Authorization: Bearer <token>`` (or ``?token=`` on ``/ws``).
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

from mesh._errors import ConnectionLost, Unauthorized
from mesh._logging import get_logger
from mesh._rpc.connect import INFO_OFFER, handshake_request, link_websocket_config
from mesh._rpc.exchange import Exchange
from mesh._rpc.peer import Peer, serve_peer
from mesh._rpc.reconnect import ReconnectPolicy, open_reconnecting_peer
from mesh._rpc.session import SessionConfig
from mesh._sdk.agent import Agent
from transports import (
    CloseCode,
    HttpRequest,
    HttpResponse,
    HttpServer,
    HttpServerConfig,
    TokenAuthenticator,
    WebSocketConfig,
    WebSocketStream,
    bearer_challenge,
    bearer_token,
    open_http_server,
    open_websocket,
    websocket_upgrade_handler,
)

__all__ = ["open_agent_server", "serve_agent_dial_in"]

log = get_logger("mesh.serve")


class _AgentRoutes:
    def __init__(
        self, agent: Agent, tokens: TokenAuthenticator | None, config: SessionConfig
    ) -> None:
        self._agent = agent
        self._tokens = tokens
        self._exchange = Exchange(agent, config=config, agent=agent.id)

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == "/health":
            if request.method != "GET":
                return HttpResponse.error(405, "use GET /health")
            return HttpResponse.json(
                200, {"status": "ok", "agent": self._agent.id, "name": self._agent.name}
            )
        if request.path == "/rpc":
            if request.method != "POST":
                return HttpResponse.error(405, "use POST /rpc with one message as the body")
            return await self._rpc(request)
        return HttpResponse.error(404, f"no route {request.method} {request.path}; try POST /rpc")

    async def _rpc(self, request: HttpRequest) -> HttpResponse:
        if self._tokens is not None:
            token = bearer_token(request.header("authorization"), None)
            if self._tokens.identify(token) is None:
                _, challenge = bearer_challenge(request.header("authorization"), realm="agent")
                refused = HttpResponse.error(401, "missing or invalid bearer token")
                return dataclasses.replace(refused, headers=[("www-authenticate", challenge)])
        answer, invalid = await self._exchange.answer(request.body)
        if answer is None:
            return HttpResponse(204)
        # An invalid body is answered with the mesh's error message (it names the path).
        return HttpResponse(400 if invalid else 200, answer)


@asynccontextmanager
async def open_agent_server(
    agent: Agent,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tokens: TokenAuthenticator | None = None,
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig | None = None,
    http_config: HttpServerConfig | None = None,
    websocket_config: WebSocketConfig | None = None,
    on_link: Callable[[Peer], object] | None = None,
) -> AsyncIterator[HttpServer]:
    """Serve ``agent`` over HTTP (``/rpc``) and WebSocket (``/ws``) on one port.

    ``on_link(peer)`` is called with each WebSocket link's :class:`~mesh.Peer` as it
    is served, before the client's handshake is answered: a client whose link is up
    is already known. A server that keeps its clients (to notify them all with
    :meth:`~mesh.Peer.broadcast_nowait`, say) keeps them from here; ``peer.closed``
    says when one has gone. An exception from it closes that link.
    """
    session_config = config or SessionConfig()
    ws_config = websocket_config or link_websocket_config(session_config)
    http_config = http_config or HttpServerConfig(max_body_size=session_config.max_frame_size)

    async def serve_link(stream: WebSocketStream, agent_id: str | None) -> None:
        # One frame less per link: the server's peer reads on this task.
        asked = handshake_request(stream)
        await serve_peer(
            stream, agent, config=session_config, handshake_request=asked, on_start=on_link
        )

    async with open_http_server(
        _AgentRoutes(agent, tokens, session_config),
        host=host,
        port=port,
        upgrade_handler=websocket_upgrade_handler(
            serve_link, authenticator=tokens, config=ws_config, offers=(INFO_OFFER,)
        ),
        ssl_context=ssl_context,
        config=http_config,
    ) as server:
        yield server


async def serve_agent_dial_in(
    agent: Agent,
    url: str,
    *,
    token: str | None,
    policy: ReconnectPolicy | None = None,
    ssl_context: ssl.SSLContext | None = None,
    config: SessionConfig | None = None,
    websocket_config: WebSocketConfig | None = None,
) -> None:
    """Dial in to a daemon's ``/ws`` and serve ``agent`` over that link, for ever.

    The link is a :class:`~mesh.ReconnectingPeer` serving the agent: when it drops
    the agent redials with backoff (``policy``), and every dial re-authenticates. A
    refusal (close 4001 or 4003, see ``ReconnectPolicy.refusal_close_codes``) means
    the token is wrong for this agent: retrying cannot help, so
    :class:`~mesh.Unauthorized` is raised; running out of attempts raises
    :class:`~mesh.ConnectionLost`. A 4009 close means a newer connection took the
    agent's id over (a rolling restart): the work of this process is done, and
    this returns.
    """
    session_config = config or SessionConfig()
    ws_config = websocket_config or link_websocket_config(session_config)
    connector = partial(
        open_websocket,
        url,
        token=token,
        headers=[("X-Agent-Id", agent.id)],
        ssl_context=ssl_context,
        config=ws_config,
    )
    try:
        async with open_reconnecting_peer(
            connector,
            agent=agent.id,
            policy=_stop_when_taken_over(policy or ReconnectPolicy()),
            config=session_config,
            handler=agent,
        ) as link:
            await link.wait_closed()
            error = link.close_error
    except ConnectionLost as exc:  # the first connection never came up
        error = exc
    if error is not None and _close_code(error) == CloseCode.TAKEN_OVER:
        log.info("agent.taken_over", agent=agent.id, url=url)
        return
    if error is not None:
        raise _refusal(error, url, agent.id) or error


def _stop_when_taken_over(policy: ReconnectPolicy) -> ReconnectPolicy:
    codes = policy.refusal_close_codes | {CloseCode.TAKEN_OVER}
    return dataclasses.replace(policy, refusal_close_codes=codes)


def _close_code(error: ConnectionLost) -> int | None:
    code: int | None = getattr(error.__cause__, "close_code", None)
    return code


def _refusal(error: ConnectionLost, url: str, agent_id: str) -> Unauthorized | None:
    cause = error.__cause__
    code = getattr(cause, "close_code", None)
    if isinstance(cause, Unauthorized) or code in (CloseCode.UNAUTHORIZED, CloseCode.FORBIDDEN):
        refused = Unauthorized(f"{url} refused the token ({cause})", agent=agent_id)
        refused.__cause__ = cause
        return refused
    return None
