"""Test helpers that ship with the package: echo-agent launchers and recorders.

Use them in your own tests as the mesh's tests do::

    async with open_echo_agent() as peer:          # the live echo agent, over stdio
        assert await peer.call_tool("echo", {"message": "hi"}) == {"message": "hi"}
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import sniffio

from mesh._agent import Agent
from mesh._connect import connect_stdio
from mesh._peer import Peer, RequestContext, open_peer, serve_peer
from mesh._session import SessionConfig
from transports import DEFAULT_MAX_FRAME_SIZE, memory_stream_pair
from transports._groups import unwrap_single_error

__all__ = [
    "NotificationRecorder",
    "echo_agent_command",
    "open_echo_agent",
    "open_memory_peer",
]


def echo_agent_command(*extra: str) -> tuple[str, list[str]]:
    """The command line that runs the live echo agent over stdio with this Python."""
    return sys.executable, ["-m", "mesh.agents.echo", "--stdio", *extra]


class NotificationRecorder:
    """A request handler for the *calling* side that records every notification.

    ``await recorder.wait_for(method, predicate)`` returns the first matching
    params, waiting (bounded by the caller's own ``fail_after``) if none came yet.
    """

    def __init__(self) -> None:
        self.received: defaultdict[str, list[Any]] = defaultdict(list)
        self._changed = anyio.Event()

    async def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        from mesh._errors import MethodNotFound

        raise MethodNotFound(f"the test client serves no methods ({method!r})")

    async def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        self.received[method].append(params)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, method: str, predicate: Callable[[Any], bool] = lambda _: True) -> Any:
        while True:
            for params in self.received[method]:
                if predicate(params):
                    return params
            await self._changed.wait()


@asynccontextmanager
async def open_echo_agent(
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
    backend: str | None = None,
    extra_args: Sequence[str] = (),
) -> AsyncIterator[Peer]:
    """Start the live echo agent as a child process and connect to it over stdio.

    ``backend`` picks the agent's event loop (default: the caller's).
    """
    command, args = echo_agent_command(
        "--backend", backend or sniffio.current_async_library(), *extra_args
    )
    async with connect_stdio(command, args, agent="echo", config=config, handler=handler) as peer:
        yield peer


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
