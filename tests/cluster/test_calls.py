"""Calls across daemons, in one process: an agent held by one member, called from another."""

from __future__ import annotations

import pytest

from mesh import AgentSpec, local_connector
from mesh.agents.echo import agent as echo_agent
from mesh.testing import NatsServer, spawn_nats_server
from tests.cluster._helpers import open_member, wait_status

pytestmark = pytest.mark.anyio


@pytest.fixture
async def nats() -> NatsServer:  # type: ignore[misc]
    async with spawn_nats_server() as server:
        yield server


async def test_an_agent_on_one_member_is_called_from_another(nats: NatsServer) -> None:
    spec = AgentSpec("echo", local_connector(echo_agent), capabilities=frozenset({"echo"}))
    async with open_member(nats.url, "a", [spec]) as a, open_member(nats.url, "b") as b:
        await wait_status(b.mesh.registry, "echo")
        record = b.mesh.registry.get("echo")  # type: ignore[arg-type]
        assert record is not None and record.metadata["mesh.daemon"] == "a"
        result = await b.mesh.call_tool("echo", "echo", {"message": "hi"})
        assert result == {"message": "hi"}
        assert b.cluster.holder("echo") == "a"
        assert a.cluster.calls.calls_served == 1
