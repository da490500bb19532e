"""What the orchestrator needs to link one agent, what a broadcast returns, and local links.

:class:`AgentSpec` is a manifest distilled (``links`` makes one from each manifest);
:class:`Outcome` is one agent's part of a broadcast; :func:`local_connector` links
an agent served in this process, over the memory transport.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from mesh._errors import MeshError
from mesh._rpc.session import SessionConfig
from mesh._sdk.agent import Agent
from mesh._tasks import open_task_group
from mesh.manifests._types import AccessSection
from registry import AgentId, AgentRecord
from transports import Connector, FrameStream, memory_stream_pair

__all__ = ["LINK_SILENCE_GRACE", "AgentSpec", "Outcome", "local_connector", "open_local_stream"]

#: A link is only torn down for silence this long after the registry's TTL: the
#: registry says offline first, and a frozen agent that thaws comes back on the
#: same link (seen in tests with SIGSTOP / SIGCONT).
LINK_SILENCE_GRACE: Final = 60.0


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """What the orchestrator needs to know to link one agent (a manifest, distilled)."""

    id: str
    connector: Connector | None
    name: str = ""
    transport: str = "memory"
    #: What it speaks on that transport: the mesh's own protocol, or one a wing adapts
    #: (``mcp``, ``a2a``), shown beside the transport.
    protocol: str = "mesh"
    endpoint: str | None = None
    capabilities: frozenset[str] = frozenset()
    heartbeat_interval: float = 10.0
    #: Seconds of silence before the agent is offline; 0 means three intervals.
    heartbeat_ttl: float = 0.0
    call_timeout: float = 30.0
    max_frame_size: int = 1 << 20
    #: How long one attempt to link has to come up; None: the orchestrator's connect_timeout.
    start_timeout: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: Who may call this agent and whom it may call (a manifest's ``[access]``).
    access: AccessSection = field(default_factory=AccessSection)

    def __post_init__(self) -> None:
        if self.heartbeat_ttl == 0.0:
            object.__setattr__(self, "heartbeat_ttl", 3 * self.heartbeat_interval)

    def session_config(self) -> SessionConfig:
        return SessionConfig(
            call_timeout=self.call_timeout,
            heartbeat_interval=self.heartbeat_interval,
            heartbeat_ttl=self.heartbeat_ttl + LINK_SILENCE_GRACE,
            max_frame_size=self.max_frame_size,
        )

    def record(self) -> AgentRecord:
        return AgentRecord(
            id=AgentId(self.id),
            name=self.name or self.id,
            transport=self.transport,
            endpoint=self.endpoint,
            capabilities=self.capabilities,
            metadata=dict(self.metadata),
            heartbeat_interval=self.heartbeat_interval,
            heartbeat_ttl=self.heartbeat_ttl,
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """One agent's answer to a broadcast: a result, or the error that names why not."""

    agent: str
    result: Any = None
    error: MeshError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def local_connector(agent: Agent) -> Connector:
    """A connector that serves ``agent`` in this process over the memory transport."""
    return lambda: open_local_stream(agent)


@asynccontextmanager
async def open_local_stream(
    agent: Agent, *, stop: anyio.Event | None = None
) -> AsyncIterator[FrameStream]:
    """Serve ``agent`` on one end of a memory link for the ``async with``; yield the other end.

    Setting ``stop`` ends the agent's side at once (the link drops, as when an
    agent's process dies); :class:`mesh.testing.KillableConnector` uses it.
    """
    ours, theirs = memory_stream_pair()
    async with open_task_group() as tg:
        tg.start_soon(_serve_until, agent, theirs, stop or anyio.Event())
        try:
            yield ours
        finally:
            await theirs.aclose()
            tg.cancel_scope.cancel()


async def _serve_until(agent: Agent, stream: FrameStream, stop: anyio.Event) -> None:
    # A task group of its own, so that stopping cancels the agent and nothing else.
    async with anyio.create_task_group() as tg:

        async def serve() -> None:
            await agent.serve(stream)
            tg.cancel_scope.cancel()

        tg.start_soon(serve)
        await stop.wait()
        tg.cancel_scope.cancel()
    await stream.aclose()
