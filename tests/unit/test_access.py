"""Who may call whom: reserved methods and the access section, through mesh/call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from mesh import Agent, AgentSpec, ErrorCode, Forbidden, MeshOrchestrator, RequestContext
from mesh._orchestrator.access import (
    EMBEDDER,
    Principal,
    authorize,
    check_agent_call,
    check_client_call,
    check_deadline,
    check_relayable,
    is_reserved,
)
from mesh.manifests import AccessSection
from mesh.testing import KillableConnector

pytestmark = pytest.mark.anyio

#: The default access section: any client, any agent; calls anyone.
OPEN = AccessSection()


def test_reserved_methods() -> None:
    assert is_reserved("room/turn") and is_reserved("room/persona")
    assert is_reserved("mesh/call") and is_reserved("mesh/anything/new")
    assert not is_reserved("tools/call") and not is_reserved("ping")
    with pytest.raises(Forbidden, match=r"'room/turn' is reserved.*through /rpc") as caught:
        check_relayable("room/turn", agent="bob", via="/rpc")
    assert caught.value.code == ErrorCode.FORBIDDEN
    assert int(ErrorCode.FORBIDDEN) == -32007


def test_client_access() -> None:
    default = AccessSection()
    check_client_call(default, client="ann", admin=False, agent="a", method="ping")
    only_bob = AccessSection(callers=("client:bob", "agents"))
    check_client_call(only_bob, client="bob", admin=False, agent="a", method="ping")
    check_client_call(only_bob, client="ann", admin=True, agent="a", method="ping")
    with pytest.raises(Forbidden, match=r"does not accept calls from client token 'ann'"):
        check_client_call(only_bob, client="ann", admin=False, agent="a", method="ping")


def test_agent_access() -> None:
    default = AccessSection()
    check_agent_call(default, default, caller_id="x", agent="y", method="ping")
    narrow = AccessSection(calls=("z",))
    with pytest.raises(Forbidden, match=r"agent 'x' may not call 'y' \(its access.calls is"):
        check_agent_call(narrow, default, caller_id="x", agent="y", method="ping")
    picky = AccessSection(callers=("clients", "agent:w"))
    with pytest.raises(Forbidden, match=r"agent 'y' does not accept calls from agent 'x'"):
        check_agent_call(default, picky, caller_id="x", agent="y", method="ping")
    check_agent_call(default, picky, caller_id="w", agent="y", method="ping")


def _forwarder() -> Agent:
    agent = Agent("fwd")

    @agent.tool
    async def forward(to: str, method: str, ctx: RequestContext) -> Any:
        return await ctx.call_agent(to, method, {"name": "hello", "arguments": {}}, timeout=5)

    return agent


def _greeter() -> Agent:
    agent = Agent("greeter")

    @agent.tool
    def hello() -> str:
        return "hi"

    @agent.method("room/turn")
    def turn(ctx: RequestContext, params: Any) -> str:  # a stranger's text in a room, if relayed
        return "spoken"

    return agent


@asynccontextmanager
async def two_agents(
    fwd: AccessSection = OPEN, greeter: AccessSection = OPEN, max_call_timeout: float | None = None
) -> AsyncIterator[MeshOrchestrator]:
    specs = [
        AgentSpec("fwd", KillableConnector(_forwarder()), access=fwd),
        AgentSpec("greeter", KillableConnector(_greeter()), access=greeter),
    ]
    async with MeshOrchestrator(specs, max_call_timeout=max_call_timeout) as mesh:
        yield mesh


async def forward(mesh: MeshOrchestrator, method: str) -> Any:
    with anyio.fail_after(10):
        return await mesh.call_tool(
            "fwd", "forward", {"to": "greeter", "method": method}, on_behalf_of=EMBEDDER
        )


async def test_mesh_call_relays_an_allowed_call() -> None:
    async with two_agents() as mesh:
        assert await forward(mesh, "tools/call") == "hi"


@pytest.mark.parametrize("method", ["room/turn", "room/persona", "mesh/call"])
async def test_mesh_call_refuses_reserved_methods(method: str) -> None:
    async with two_agents() as mesh:
        with pytest.raises(Forbidden, match="reserved to the daemon") as caught:
            await forward(mesh, method)
    assert caught.value.code == ErrorCode.FORBIDDEN


async def test_mesh_call_follows_both_access_sections() -> None:
    async with two_agents(fwd=AccessSection(calls=("someone-else",))) as mesh:
        with pytest.raises(Forbidden, match=r"its access\.calls is"):
            await forward(mesh, "tools/call")
    async with two_agents(greeter=AccessSection(callers=("clients",))) as mesh:
        with pytest.raises(Forbidden, match="does not accept calls from agent 'fwd'"):
            await forward(mesh, "tools/call")
    async with two_agents(greeter=AccessSection(callers=("agent:fwd",))) as mesh:
        assert await forward(mesh, "tools/call") == "hi"


# -- the one door: who a call is made for ------------------------------------------------


def _door(principal: Principal, agent: str, method: str = "tools/call") -> None:
    sections = {
        "vault": AccessSection(callers=("client:ops", "agent:keeper")),
        "keeper": AccessSection(calls=("vault",)),
        "narrow": AccessSection(calls=("nobody",)),
    }
    authorize(principal, agent, method, lambda a: sections.get(a, OPEN))


def test_the_door_by_principal() -> None:
    _door(EMBEDDER, "vault", "room/turn")  # the embedding program: trusted
    _door(Principal.client("ops"), "vault")
    _door(Principal.client("dev", admin=True), "vault")
    with pytest.raises(Forbidden, match="does not accept calls from client token 'dev'"):
        _door(Principal.client("dev"), "vault")
    with pytest.raises(Forbidden, match="reserved to the daemon"):
        _door(Principal.client("ops", admin=True), "vault", "room/turn")
    _door(Principal.agent("keeper"), "vault")
    with pytest.raises(Forbidden, match=r"agent 'narrow' may not call 'vault'"):
        _door(Principal.agent("narrow"), "vault")
    with pytest.raises(Forbidden, match="reserved to the daemon"):
        _door(Principal.agent("keeper"), "vault", "mesh/call")


def test_a_room_calls_for_its_creator_and_sends_only_room_methods() -> None:
    _door(Principal.client("ops").in_room("r"), "vault", "room/turn")
    _door(EMBEDDER.in_room("r"), "vault", "room/persona")
    with pytest.raises(Forbidden, match="does not accept calls from client token 'dev'"):
        _door(Principal.client("dev").in_room("r"), "vault", "room/turn")
    with pytest.raises(Forbidden, match=r"room 'r' may send only .* not 'tools/call'"):
        _door(Principal.client("ops").in_room("r"), "vault", "tools/call")
    assert Principal.client("ops").in_room("r").describe() == "room 'r' of client token 'ops'"


async def test_the_orchestrator_checks_before_touching_a_link() -> None:
    async with two_agents(greeter=AccessSection(callers=("client:ops",))) as mesh:
        dev, ops = Principal.client("dev"), Principal.client("ops")
        assert await mesh.call_tool("greeter", "hello", on_behalf_of=ops) == "hi"
        with pytest.raises(Forbidden):
            await mesh.call_tool("greeter", "hello", on_behalf_of=dev)
        with pytest.raises(Forbidden):
            await mesh.ping("greeter", on_behalf_of=dev)
        with pytest.raises(Forbidden):
            await mesh.list_tools("greeter", on_behalf_of=dev)
        outcomes = await mesh.broadcast("ping", on_behalf_of=dev)
        assert isinstance(outcomes["greeter"].error, Forbidden) and outcomes["fwd"].ok
        with pytest.raises(Forbidden, match="reserved"):
            await mesh.multicast(["fwd"], "room/turn", on_behalf_of=ops)


def test_a_deadline_is_held_to_the_limit_for_all_but_the_embedder() -> None:
    dev = Principal.client("dev")
    for allowed in (None, 0.5, 300):
        check_deadline(dev, allowed, 300, agent="vault", method="tools/call")
    for refused in (300.5, 0, -1, float("nan"), float("inf")):
        with pytest.raises(Forbidden, match=r"outside \(0, 300\] s.*client token 'dev'") as caught:
            check_deadline(dev, refused, 300, agent="vault", method="tools/call")
        assert caught.value.data == {"limit": "max_call_timeout", "max": 300}
    check_deadline(EMBEDDER, 10**9, 300, agent="vault", method="tools/call")
    check_deadline(EMBEDDER.in_room("r"), 10**9, 300, agent="vault", method="room/turn")
    check_deadline(dev, 10**9, None, agent="vault", method="tools/call")  # no limit set
    with pytest.raises(Forbidden, match="room 'r' of client token 'dev'"):
        check_deadline(dev.in_room("r"), 301, 300, agent="vault", method="room/turn")


async def test_the_orchestrator_holds_every_callers_deadline_to_its_limit() -> None:
    async with two_agents(max_call_timeout=30) as mesh:
        dev, fwd = Principal.client("dev"), Principal.agent("fwd")
        assert await mesh.call_tool("greeter", "hello", timeout=30, on_behalf_of=dev) == "hi"
        with pytest.raises(Forbidden, match="max_call_timeout"):
            await mesh.call_tool("greeter", "hello", timeout=31, on_behalf_of=dev)
        with pytest.raises(Forbidden, match="max_call_timeout"):
            await mesh.call("greeter", "ping", timeout=31, on_behalf_of=fwd)
        with pytest.raises(Forbidden, match="max_call_timeout"):  # the whole, before anyone
            await mesh.broadcast("ping", timeout=31, on_behalf_of=dev)
        with pytest.raises(Forbidden, match="max_call_timeout"):
            mesh.authorize("greeter", "room/turn", on_behalf_of=dev.in_room("r"), timeout=31)
        assert (
            await mesh.call_tool("greeter", "hello", timeout=3600, on_behalf_of=EMBEDDER) == "hi"
        )  # the embedder


async def test_an_agents_own_longer_call_timeout_is_a_deadline_callers_may_give() -> None:
    # The operator set it (a call naming none gets it, and a daemon forwarding a call for it
    # sends it along): the door allows it, and no more.
    specs = [AgentSpec("slow", KillableConnector(_greeter()), call_timeout=60)]
    async with MeshOrchestrator(specs, max_call_timeout=30) as mesh:
        dev = Principal.client("dev")
        assert mesh.deadline_limit("slow") == 60 and mesh.deadline_limit("elsewhere") == 30
        assert await mesh.call_tool("slow", "hello", timeout=60, on_behalf_of=dev) == "hi"
        with pytest.raises(Forbidden, match=r"outside \(0, 60\] s"):
            await mesh.call_tool("slow", "hello", timeout=61, on_behalf_of=dev)
