"""One factory per transport, each yielding a Peer connected to a live echo agent.

The conformance suite runs its every test over each of them. A new transport
joins by adding a factory here: to ``OWN_AGENT`` if the agent's process is the link,
to ``SHARED_AGENT`` if a test can dial its own link to a process others share.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial

import pytest

from mesh import Peer, SessionConfig, open_http_peer, open_websocket_peer
from mesh.agents.echo import agent as echo_agent
from mesh.testing import (
    NotificationRecorder,
    open_dial_in_echo_agent,
    open_echo_agent,
    open_memory_peer,
)
from tests.conformance._servers import SharedServer, SharedServers

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
    server: SharedServer,
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
) -> AsyncIterator[Peer]:
    # Over HTTP the agent cannot push frames: progress and notifications have no way back.
    async with open_http_peer(server.http, token=server.token, agent="echo", config=config) as peer:
        yield peer


@asynccontextmanager
async def _websocket(
    server: SharedServer,
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
) -> AsyncIterator[Peer]:
    async with open_websocket_peer(
        server.ws, token=server.token, agent="echo", config=config, handler=handler
    ) as peer:
        yield peer


@asynccontextmanager
async def _websocket_dial_in(
    *, handler: NotificationRecorder | None = None, config: SessionConfig | None = None
) -> AsyncIterator[Peer]:
    async with open_dial_in_echo_agent(handler=handler, config=config) as peer:
        yield peer


#: Each test starts its own agent: the process is the link (stdio, dial-in) or in this one.
OWN_AGENT: dict[str, EchoFactory] = {
    "memory": _memory,
    "stdio": _stdio,
    "websocket-dial-in": _websocket_dial_in,
}
#: Each test dials its own link to an agent process shared by the module, one per backend
#: (see _servers.py): a new connection is a new session, so nothing a test leaves behind
#: in its session reaches the next.
SHARED_AGENT: dict[str, Callable[..., AbstractAsyncContextManager[Peer]]] = {
    "http": _http,
    "websocket": _websocket,
}
TRANSPORTS = sorted([*OWN_AGENT, *SHARED_AGENT])
#: What a request/response transport cannot do: the agent has no channel back.
NO_PUSH = {"http"}


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def shared_echo_servers() -> Iterator[SharedServers]:
    servers = SharedServers(token="conformance-secret")
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
def open_echo(
    transport: str, anyio_backend: str, shared_echo_servers: SharedServers
) -> Iterator[EchoFactory]:
    if transport in OWN_AGENT:
        yield OWN_AGENT[transport]
        return
    server = shared_echo_servers.get(anyio_backend)
    yield partial(SHARED_AGENT[transport], server)
    server.check_alive()
