"""One factory per transport, each yielding a Peer connected to a live echo agent.

The conformance suite runs its every test over each of them. A new transport
joins by adding a factory here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from mesh import Peer, SessionConfig
from mesh.agents.echo import agent as echo_agent
from mesh.testing import NotificationRecorder, open_echo_agent, open_memory_peer

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


FACTORIES: dict[str, EchoFactory] = {"memory": _memory, "stdio": _stdio}


@pytest.fixture(params=sorted(FACTORIES))
def open_echo(request: pytest.FixtureRequest) -> EchoFactory:
    return FACTORIES[request.param]
