"""The orchestrator over in-process agents (memory transport): calls, routing, broadcast."""

from __future__ import annotations

import anyio
import pytest

from mesh import (
    EMBEDDER,
    Agent,
    AgentSpec,
    AgentUnavailable,
    Caller,
    ConnectionLost,
    ErrorCode,
    MeshOrchestrator,
    ReconnectPolicy,
    RemoteError,
    RequestContext,
    local_connector,
    open_reconnecting_peer,
)
from mesh._orchestrator.view import LinkChanges
from mesh.agents.echo import agent as echo_agent
from mesh.testing import KillableConnector, open_memory_peer
from registry import AgentId, AgentStatus

pytestmark = pytest.mark.anyio


def spec(agent_id: str, agent: Agent = echo_agent) -> AgentSpec:
    return AgentSpec(agent_id, local_connector(agent), capabilities=frozenset({"echo"}))


async def test_call_route_and_fail_fast() -> None:
    async with MeshOrchestrator([spec("a"), spec("b")]) as mesh:
        assert await mesh.call_tool("a", "echo", {"message": "hi"}, on_behalf_of=EMBEDDER) == {
            "message": "hi"
        }
        # agent a asks agent b, through the mesh
        assert await mesh.call_tool(
            "a", "relay", {"to": "b", "message": "via a"}, on_behalf_of=EMBEDDER
        ) == {
            "from": "b",
            "message": "via a",
        }
        with pytest.raises(AgentUnavailable, match="no agent 'nobody' is registered"):
            await mesh.call("nobody", "ping", on_behalf_of=EMBEDDER)
        with pytest.raises(AgentUnavailable, match="no agent 'ghost'"):
            await mesh.call_tool(
                "a", "relay", {"to": "ghost", "message": "x"}, on_behalf_of=EMBEDDER
            )
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
        # the 30 s sleep: the guard is a hang guard between the two. r let the mesh's
        # CallTimeout out of its handler, so to us it is r's answer: a RemoteError.
        with (
            anyio.fail_after(10),
            pytest.raises(RemoteError, match=r"no response within 0\.3 s") as timed_out,
        ):
            await mesh.call_tool("r", "slow_relay", {"to": "b"}, on_behalf_of=EMBEDDER)
        assert timed_out.value.code == ErrorCode.TIMEOUT
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
                "tools/call",
                {"name": "echo", "arguments": {"message": "all"}},
                timeout=2,
                on_behalf_of=EMBEDDER,
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
            await mesh.call("a", "ping", on_behalf_of=EMBEDDER)


#: An agent whose one tool takes arguments named like the call's own options.
options_agent = Agent("options")


@options_agent.tool
def options(timeout: float, on_progress: str) -> dict[str, object]:
    return {"timeout": timeout, "on_progress": on_progress}


OPTION_NAMED = {"timeout": 600.0, "on_progress": "not a callback"}


async def test_a_tool_argument_named_timeout_reaches_the_tool() -> None:
    async with MeshOrchestrator([spec("o", options_agent)]) as mesh:
        assert (
            await mesh.call_tool("o", "options", OPTION_NAMED, timeout=5, on_behalf_of=EMBEDDER)
            == OPTION_NAMED
        )
    async with open_memory_peer(options_agent) as peer:
        assert await peer.call_tool("options", OPTION_NAMED, timeout=5) == OPTION_NAMED
    connector = local_connector(options_agent)
    async with open_reconnecting_peer(connector, agent="options") as reconnecting:
        assert await reconnecting.call_tool("options", OPTION_NAMED, timeout=5) == OPTION_NAMED


async def call_everything(caller: Caller) -> None:
    """Every Caller method, written once against the protocol, for either kind of peer."""
    assert caller.connected and not caller.closed and caller.agent == "echo"
    before = caller.statistics().calls_succeeded  # a reconnecting peer's handshake is one
    assert await caller.call("tools/call", {"name": "echo", "arguments": {"message": "a"}}) == {
        "message": "a"
    }
    assert await caller.call_tool("echo", {"message": "b"}) == {"message": "b"}
    assert "echo" in {tool["name"] for tool in await caller.list_tools()}
    await caller.ping()  # answered: the count below has it among the four
    await caller.notify("hello")
    caller.notify_nowait("hello again")
    assert caller.statistics().calls_succeeded == before + 4
    await caller.aclose()
    with anyio.fail_after(5):
        await caller.wait_closed()
    assert (caller.closed, caller.connected) == (True, False)  # read again after closing


async def test_both_peers_are_callers() -> None:
    async with open_memory_peer(echo_agent) as peer:
        assert isinstance(peer, Caller)
        await call_everything(peer)
    connector = local_connector(echo_agent)
    async with open_reconnecting_peer(connector, agent="echo") as reconnecting:
        assert isinstance(reconnecting, Caller)
        await call_everything(reconnecting)


async def test_link_changes_are_coalesced_per_agent() -> None:
    changes = LinkChanges()
    for agent_id in ("a", "b", "a", "a"):
        changes.add(agent_id)
    assert await changes.next() == ["a", "b"]
    got: list[list[str]] = []

    async def read() -> None:
        got.append(await changes.next())

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        assert got == []  # nothing changed since: the reader waits
        changes.add("c")
    assert got == [["c"]]


async def test_a_link_that_gives_up_before_it_ever_connected_is_told_to_link_watchers() -> None:
    dead = KillableConnector(echo_agent)
    dead.kill()
    policy = ReconnectPolicy(base=0.01, max_attempts=2)
    async with MeshOrchestrator(policy=policy) as mesh:
        with mesh.watch_links() as links, anyio.fail_after(5):
            mesh.add_agent(AgentSpec("never", dead))
            seen: list[tuple[str, str | None]] = []
            for _ in range(3):  # a failed attempt, then giving up (perhaps told at once)
                assert await links.next() == ["never"]
                shown = mesh.view("never")
                assert shown is not None and not shown.registered
                seen.append((shown.status, shown.link_error))
                if shown.status == "offline":
                    break
        status, error = seen[-1]
        assert status == "offline"
        assert error == "gave up connecting to agent 'never' after 2 attempts: the agent is dead"
        assert mesh.registry.get(AgentId("never")) is None  # the registry never knew it
