"""An agent served in this process over the memory transport: a peer to it, or a connector
a test can kill."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from mesh._orchestrator.spec import open_local_stream
from mesh._rpc.peer import Peer, open_peer, serve_peer
from mesh._rpc.session import SessionConfig
from mesh._sdk.agent import Agent
from mesh.testing._recorder import NotificationRecorder
from transports import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameStream,
    TransportClosed,
    memory_stream_pair,
    unwrap_single_error,
)

__all__ = ["KillableConnector", "open_memory_peer"]


class KillableConnector:
    """A connector (see :class:`mesh.AgentSpec`) to ``agent`` served in this process, over
    the memory transport, that a test can kill for good: the link drops and every
    later connection attempt fails, as with an agent process that died.

    It is :func:`mesh.local_connector` with a kill switch.
    """

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.dead = False
        self._kill = anyio.Event()

    def kill(self) -> None:
        self.dead = True
        self._kill.set()

    @asynccontextmanager
    async def __call__(self) -> AsyncIterator[FrameStream]:
        if self.dead:
            raise TransportClosed("the agent is dead")
        async with open_local_stream(self.agent, stop=self._kill) as stream:
            yield stream


@asynccontextmanager
async def open_memory_peer(
    agent: Agent,
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> AsyncIterator[Peer]:
    """Serve ``agent`` in this process over an in-memory link; yield the client side."""
    client_stream, server_stream = memory_stream_pair(max_frame_size=max_frame_size)
    with unwrap_single_error():
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_peer, server_stream, agent)
            async with open_peer(
                client_stream, handler=handler, config=config, agent=agent.id
            ) as peer:
                yield peer
            await server_stream.aclose()
