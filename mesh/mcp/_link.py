"""An MCP server as a connector: what :func:`mcp_connector` hands the orchestrator.

Each connection opens the server's own stream (a stdio child, or streamable HTTP),
runs an MCP :class:`~mesh.Peer` on it with the MCP codec, lets a
:class:`~mesh.mcp._mount.McpMount` agree a revision and list the tools, and serves
the mount on one end of an in-memory link. The other end, a :class:`MountStream`,
is what the orchestrator's own peer talks over; when the MCP link dies, it says
why (exit status, last stderr lines), so every call in flight fails with that.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio

from mesh._rpc.peer import Peer, open_peer
from mesh._rpc.session import SessionConfig
from mesh.manifests._types import MCP_START_TIMEOUT
from mesh.mcp._codec import MCP_CODEC
from mesh.mcp._mount import McpMount, Revision
from transports import (
    Connector,
    FrameStream,
    TransportClosed,
    TransportInfo,
    memory_stream_pair,
)
from transports._groups import unwrap_single_error

__all__ = ["MountStream", "mcp_connector", "open_mcp_mount"]


class MountStream:
    """The orchestrator's end of a mount: frames go to the mount, and when the MCP
    link dies, the reason (exit status, last stderr lines) comes out of ``receive``."""

    def __init__(self, inner: FrameStream, wire: FrameStream, mcp: Peer) -> None:
        self._inner = inner
        self.wire = wire  # the MCP server's own stream (a stdio child's has its ``pid``)
        self._mcp = mcp

    @property
    def info(self) -> TransportInfo:
        return self.wire.info

    @property
    def max_frame_size(self) -> int:
        return self._inner.max_frame_size

    async def send(self, frame: bytes) -> None:
        await self._inner.send(frame)

    async def send_many(self, frames: Sequence[bytes]) -> None:
        await self._inner.send_many(frames)

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        return self._inner.send_nowait(frames)

    async def receive(self) -> bytes:
        try:
            return await self._inner.receive()
        except TransportClosed:
            raise self._why() from None

    def _why(self) -> TransportClosed:
        error = self._mcp.close_error
        if error is None:
            return TransportClosed("the MCP mount closed")
        return TransportClosed(
            error.message,
            exit_code=error.exit_code,
            close_code=error.close_code,
            stderr_tail=error.stderr_tail,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def mcp_connector(
    connector: Connector,
    *,
    agent: str,
    config: SessionConfig | None = None,
    revision: Revision = "auto",
    connect_timeout: float = MCP_START_TIMEOUT,
) -> Connector:
    """A connector that mounts the MCP server ``connector`` reaches (see the module docstring).

    ``config`` is the MCP link's session: its heartbeats are ``ping`` requests
    (pass ``heartbeat_interval=None`` over HTTP, where there is no idle link).
    """

    def connect() -> AbstractAsyncContextManager[FrameStream]:
        return open_mcp_mount(
            connector,
            agent=agent,
            config=config,
            revision=revision,
            connect_timeout=connect_timeout,
        )

    return connect


@asynccontextmanager
async def open_mcp_mount(
    connector: Connector,
    *,
    agent: str,
    config: SessionConfig | None = None,
    revision: Revision = "auto",
    connect_timeout: float = MCP_START_TIMEOUT,
) -> AsyncIterator[MountStream]:
    """Connect, negotiate and list tools; yield the stream the orchestrator talks over."""
    mount = McpMount(agent, revision=revision)
    with unwrap_single_error():
        async with (
            connector() as wire,
            open_peer(
                wire,
                handler=mount.server_requests,
                config=config,
                codec=MCP_CODEC,
                agent=agent,
            ) as mcp,
        ):
            await mount.attach(mcp, timeout=connect_timeout)
            ours, theirs = memory_stream_pair(max_frame_size=wire.max_frame_size)
            # The mount answers within this process: its in-memory link needs no heartbeat.
            inner = SessionConfig(heartbeat_interval=None, max_frame_size=wire.max_frame_size)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_serve_mesh_side, theirs, mount, mcp, inner)
                tg.start_soon(mount.listen_for_changes)
                try:
                    yield MountStream(ours, wire, mcp)
                finally:
                    tg.cancel_scope.cancel()


async def _serve_mesh_side(
    stream: FrameStream, mount: McpMount, mcp: Peer, config: SessionConfig
) -> None:
    async with open_peer(stream, handler=mount, config=config, agent=mount.agent) as mesh:
        mount.mesh_peer = mesh
        await mcp.wait_closed()
    await stream.aclose()
