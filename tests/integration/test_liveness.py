"""A real agent process under SIGSTOP goes stale, then offline; SIGCONT brings it back."""

from __future__ import annotations

import os
import signal
import sys
from functools import partial

import anyio
import pytest

from mesh import AgentSpec, AgentUnavailable, MeshOrchestrator, ReconnectingPeer
from registry import AgentId, AgentStatus, ChangeKind
from transports import StdioProcessStream, open_stdio_process

pytestmark = pytest.mark.anyio


async def test_sigstop_goes_stale_then_offline_and_sigcont_brings_it_back() -> None:
    interval, ttl = 0.3, 0.9
    command = partial(open_stdio_process, sys.executable, ["-m", "mesh.agents.echo", "--stdio"])
    spec = AgentSpec(
        "frozen", command, transport="stdio", heartbeat_interval=interval, heartbeat_ttl=ttl
    )
    async with MeshOrchestrator([spec]) as mesh, mesh.registry.subscribe() as changes:
        peer = mesh._links["frozen"].peer
        assert isinstance(peer, ReconnectingPeer) and peer.current is not None
        stream = peer.current.stream
        assert isinstance(stream, StdioProcessStream)
        stopped_at = anyio.current_time()
        os.kill(stream.pid, signal.SIGSTOP)
        try:
            seen: list[tuple[ChangeKind, float]] = []
            with anyio.fail_after(ttl + 3):
                async for change in changes:
                    seen.append((change.kind, anyio.current_time() - stopped_at))
                    if change.kind is ChangeKind.OFFLINE:
                        break
            assert [kind for kind, _ in seen] == [ChangeKind.STALE, ChangeKind.OFFLINE]
            assert seen[-1][1] <= ttl + 1.0, "offline within its TTL (plus one probe of slack)"
            with pytest.raises(AgentUnavailable, match="offline"):
                await mesh.call("frozen", "ping")
        finally:
            os.kill(stream.pid, signal.SIGCONT)
        with anyio.fail_after(interval * 3 + 3):
            async for change in changes:
                if change.kind is ChangeKind.ONLINE:
                    break
        record = mesh.registry.get(AgentId("frozen"))
        assert record is not None and record.status is AgentStatus.ONLINE
        thawed = {"message": "thawed"}
        assert await mesh.call_tool("frozen", "echo", thawed) == thawed
        assert peer.current is not None and peer.current.stream is stream, "the same link came back"
