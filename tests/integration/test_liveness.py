"""A real agent process under SIGSTOP goes stale, then offline; SIGCONT brings it back."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from mesh import AgentSpec, AgentUnavailable, MeshOrchestrator
from registry import AgentId, AgentStatus, ChangeKind
from transports import FrameStream, StdioProcessStream, open_stdio_process

pytestmark = pytest.mark.anyio

#: A hang guard: the agent's heartbeat TTL is 0.9 s, and a loaded machine may take many
#: times that to notice and report; nothing else can make the agent stale or offline.
GUARD = 15.0


async def test_sigstop_goes_stale_then_offline_and_sigcont_brings_it_back() -> None:
    interval, ttl = 0.3, 0.9
    links: list[StdioProcessStream] = []

    @asynccontextmanager
    async def command() -> AsyncIterator[FrameStream]:
        # The connector the orchestrator dials with: it shows us each process it starts.
        async with open_stdio_process(sys.executable, ["-m", "mesh.agents.echo", "--stdio"]) as s:
            links.append(s)
            yield s

    spec = AgentSpec(
        "frozen", command, transport="stdio", heartbeat_interval=interval, heartbeat_ttl=ttl
    )
    async with MeshOrchestrator([spec]) as mesh, mesh.registry.subscribe() as changes:
        (stream,) = links
        os.kill(stream.pid, signal.SIGSTOP)
        try:
            seen: list[ChangeKind] = []
            with anyio.fail_after(GUARD):
                async for change in changes:
                    seen.append(change.kind)
                    if change.kind is ChangeKind.OFFLINE:
                        break
            assert seen == [ChangeKind.STALE, ChangeKind.OFFLINE]
            with pytest.raises(AgentUnavailable, match="offline"):
                await mesh.call("frozen", "ping")
        finally:
            os.kill(stream.pid, signal.SIGCONT)
        with anyio.fail_after(GUARD):
            async for change in changes:
                if change.kind is ChangeKind.ONLINE:
                    break
        record = mesh.registry.get(AgentId("frozen"))
        assert record is not None and record.status is AgentStatus.ONLINE
        thawed = {"message": "thawed"}
        assert await mesh.call_tool("frozen", "echo", thawed) == thawed
        assert links == [stream], "the same link came back: no second process was started"
