"""One factory per transport, each yielding a Peer connected to a live echo agent.

The conformance suite runs its every test over each of them. A new transport
joins by adding a factory here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from mesh import Peer, SessionConfig, open_http_peer, open_websocket_peer
from mesh.agents.echo import agent as echo_agent
from mesh.testing import (
    NotificationRecorder,
    open_dial_in_echo_agent,
    open_echo_agent,
    open_memory_peer,
    spawn_echo_server,
)

EchoFactory = Callable[..., AbstractAsyncContextManager[Peer]]


@asynccontextmanager
async def _memory(
    *, handler: NotificationRecorder | None = None, config: SessionConfig | None = None
) -> AsyncIterator[Peer]:
    async with open_memory_peer(echo_agent, handler=handler, config=config) as peer:
        yield peer


@asynccontextmanager
async def _stdio(
    *, handler: NotificationRecorder | None = None, config: SessionConfig | None = None
) -> AsyncIterator[Peer]:
    async with open_echo_agent(handler=handler, config=config) as peer:
        yield peer


@asynccontextmanager
async def _http(
    *, handler: NotificationRecorder | None = None, config: SessionConfig | None = None
) -> AsyncIterator[Peer]:
    # Over HTTP the agent cannot push frames: progress and notifications have no way back.
    async with (
        spawn_echo_server(token="http-secret") as server,
        open_http_peer(server.http, token="http-secret", agent="echo", config=config) as peer,
    ):
        yield peer


@asynccontextmanager
async def _websocket(
    *, handler: NotificationRecorder | None = None, config: SessionConfig | None = None
) -> AsyncIterator[Peer]:
    async with (
        spawn_echo_server(token="ws-secret") as server,
        open_websocket_peer(
            server.ws, token="ws-secret", agent="echo", config=config, handler=handler
        ) as peer,
    ):
        yield peer


@asynccontextmanager
async def _websocket_dial_in(
    *, handler: NotificationRecorder | None = None, config: SessionConfig | None = None
) -> AsyncIterator[Peer]:
    async with open_dial_in_echo_agent(handler=handler, config=config) as peer:
        yield peer


FACTORIES: dict[str, EchoFactory] = {
    "memory": _memory,
    "stdio": _stdio,
    "http": _http,
    "websocket": _websocket,
    "websocket-dial-in": _websocket_dial_in,
}
#: What a request/response transport cannot do: the agent has no channel back.
NO_PUSH = {"http"}


@pytest.fixture(params=sorted(FACTORIES))
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_echo(transport: str) -> EchoFactory:
    return FACTORIES[transport]
