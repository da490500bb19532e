"""The orchestrator over in-process agents (memory transport): calls, routing, broadcast."""

from __future__ import annotations

import anyio
import pytest

from mesh import (
    Agent,
    AgentUnavailable,
    CallTimeout,
    ConnectionLost,
    ReconnectPolicy,
    RequestContext,
)
from mesh._orchestrator.orchestrator import AgentSpec, MeshOrchestrator, local_connector
from mesh.agents.echo import agent as echo_agent
from mesh.testing import KillableConnector
from registry import AgentId, AgentStatus

pytestmark = pytest.mark.anyio


def spec(agent_id: str, agent: Agent = echo_agent) -> AgentSpec:
    return AgentSpec(agent_id, local_connector(agent), capabilities=frozenset({"echo"}))


async def test_call_route_and_fail_fast() -> None:
    async with MeshOrchestrator([spec("a"), spec("b")]) as mesh:
        assert await mesh.call_tool("a", "echo", message="hi") == {"message": "hi"}
        # agent a asks agent b, through the mesh
        assert await mesh.call_tool("a", "relay", to="b", message="via a") == {
            "from": "b",
            "message": "via a",
        }
        with pytest.raises(AgentUnavailable, match="no agent 'nobody' is registered"):
            await mesh.call("nobody", "ping")
        with pytest.raises(AgentUnavailable, match="no agent 'ghost'"):
            await mesh.call_tool("a", "relay", to="ghost", message="x")
        assert {r.id for r in mesh.agents()} == {"a", "b"}
        assert all(r.status is AgentStatus.ONLINE for r in mesh.agents())


async def test_routed_calls_keep_their_deadline_and_name_the_target() -> None:
    router = Agent("router")

    @router.tool
    async def slow_relay(to: str, ctx: RequestContext) -> object:
        args = {"name": "sleep", "arguments": {"seconds": 30}}
        return await ctx.call_agent(to, "tools/call", args, timeout=0.3)

    async with MeshOrchestrator([spec("r", router), spec("b")]) as mesh:
        # The routed 0.3 s deadline fired (the message says so), not the 30 s default nor
        # the 30 s sleep: the guard is a hang guard between the two.
        with (
            anyio.fail_after(10),
            pytest.raises(CallTimeout, match=r"no response within 0\.3 s") as timed_out,
        ):
            await mesh.call_tool("r", "slow_relay", to="b")
        assert "agent 'b'" in timed_out.value.message or "agent 'b'" in str(timed_out.value)


async def test_broadcast_to_50_with_3_dead_returns_47_results_and_3_named_errors() -> None:
    connectors = {f"agent-{n:02d}": KillableConnector(echo_agent) for n in range(50)}
    specs = [AgentSpec(agent_id, connector) for agent_id, connector in connectors.items()]
    policy = ReconnectPolicy(base=0.01, max_attempts=2)
    async with MeshOrchestrator(specs, policy=policy) as mesh, mesh.registry.subscribe() as changes:
        assert len(mesh.agents()) == 50
        for victim in ("agent-03", "agent-17", "agent-42"):
            connectors[victim].kill()
        offline: set[str] = set()
        with anyio.fail_after(5):
            async for change in changes:
                if change.new is AgentStatus.OFFLINE:
                    offline.add(change.agent_id)
                if len(offline) == 3:
                    break
        # The dead fail at once (their errors say offline, not timeout); 10 s only guards
        # against a hang.
        with anyio.fail_after(10):
            outcomes = await mesh.broadcast(
                "tools/call", {"name": "echo", "arguments": {"message": "all"}}, timeout=2
            )
    good = [o for o in outcomes.values() if o.ok]
    bad = {o.agent: o.error for o in outcomes.values() if not o.ok}
    assert len(good) == 47 and all(o.result == {"message": "all"} for o in good)
    assert set(bad) == {"agent-03", "agent-17", "agent-42"}
    for error in bad.values():
        assert isinstance(error, (AgentUnavailable, ConnectionLost))
        assert "offline" in str(error)


async def test_an_offline_agent_fails_at_once() -> None:
    async with MeshOrchestrator([spec("a")]) as mesh:
        mesh.registry.mark_offline(AgentId("a"), anyio.current_time())
        # A wait would end in CallTimeout (30 s) or the 10 s guard, not AgentUnavailable.
        with anyio.fail_after(10), pytest.raises(AgentUnavailable, match="offline"):
            await mesh.call("a", "ping")
