"""The door is closed by default: every surface, asked with no principal, refuses and calls nothing.

Each case reaches one agent that counts what it is asked, through one surface, without
saying who the call is for. Every one must end in a refusal that says so, and the
agent must have been asked nothing: a forgotten ``on_behalf_of`` grants nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from mesh import (
    EMBEDDER,
    Agent,
    AgentSpec,
    Forbidden,
    MeshOrchestrator,
    Principal,
    RequestContext,
    local_connector,
    open_peer,
)
from mesh._orchestrator.router import Router
from mesh.a2a import A2aServer, Caller
from mesh.mcp import MCP_CODEC, ToolCatalog, serve_mcp
from mesh.rooms import RoomManager, RoomSpec
from transports import HttpRequest, memory_stream_pair

pytestmark = pytest.mark.anyio

GUARD = 10


class Counter:
    """An agent that counts every tool call and room turn it is asked."""

    def __init__(self) -> None:
        self.asked = 0
        self.agent = Agent("counted")

        @self.agent.tool
        def count() -> int:
            """Count this call."""
            self.asked += 1
            return self.asked

        @self.agent.method("room/turn")
        async def turn(ctx: RequestContext, params: Any) -> dict[str, Any]:
            self.asked += 1
            return {"text": "spoken"}


@asynccontextmanager
async def counted_mesh() -> AsyncIterator[tuple[MeshOrchestrator, Counter]]:
    counter = Counter()
    specs = [
        AgentSpec(agent_id, local_connector(counter.agent), capabilities=frozenset({"c"}))
        for agent_id in ("counted", "counted-too")
    ]
    with anyio.fail_after(GUARD):
        async with MeshOrchestrator(specs) as mesh:
            yield mesh, counter


Surface = Callable[[MeshOrchestrator, Path], Awaitable[str]]


async def orchestrator_call(mesh: MeshOrchestrator, _: Path) -> str:
    with pytest.raises(Forbidden) as refused:
        await mesh.call_tool("counted", "count")
    return refused.value.message


async def orchestrator_call_raw(mesh: MeshOrchestrator, _: Path) -> str:
    with pytest.raises(Forbidden) as refused:
        await mesh.call("counted", "tools/call", {"name": "count", "arguments": {}})
    return refused.value.message


async def orchestrator_list(mesh: MeshOrchestrator, _: Path) -> str:
    with pytest.raises(Forbidden) as refused:
        await mesh.list_tools("counted")
    return refused.value.message


async def orchestrator_ping(mesh: MeshOrchestrator, _: Path) -> str:
    with pytest.raises(Forbidden) as refused:
        await mesh.ping("counted")
    return refused.value.message


async def orchestrator_broadcast(mesh: MeshOrchestrator, _: Path) -> str:
    with pytest.raises(Forbidden) as refused:
        await mesh.broadcast("tools/call", {"name": "count", "arguments": {}}, capability="c")
    return refused.value.message


async def orchestrator_multicast(mesh: MeshOrchestrator, _: Path) -> str:
    with pytest.raises(Forbidden) as refused:
        await mesh.multicast(["counted"], "tools/call", {"name": "count", "arguments": {}})
    return refused.value.message


async def orchestrator_authorize(mesh: MeshOrchestrator, _: Path) -> str:
    with pytest.raises(Forbidden) as refused:
        mesh.authorize("counted", "tools/call")
    return refused.value.message


async def agent_link_without_an_id(mesh: MeshOrchestrator, _: Path) -> str:
    """``mesh/call`` from a link that names no agent: nobody's call."""
    ours, theirs = memory_stream_pair()
    async with (
        open_peer(ours, handler=Router(mesh.door, mesh.notices)),
        open_peer(theirs) as agent_side,
    ):
        params = {"agent": "counted", "method": "tools/call", "params": {"name": "count"}}
        with pytest.raises(Forbidden) as refused:
            await agent_side.call("mesh/call", params, timeout=GUARD)
    return refused.value.message


async def room_without_a_creator(mesh: MeshOrchestrator, data_dir: Path) -> str:
    async with RoomManager.for_orchestrator(mesh, data_dir) as rooms:
        with pytest.raises(Forbidden) as refused:
            await rooms.create(RoomSpec(topic="anything", members=("counted", "counted-too")))
    return refused.value.message


async def mcp_catalog_call(mesh: MeshOrchestrator, _: Path) -> str:
    catalog = ToolCatalog(mesh)
    answer = await catalog.call_tool("counted__count", {})
    assert answer is not None and answer["isError"] is True, answer
    return str(answer["content"][0]["text"])


async def mcp_session(mesh: MeshOrchestrator, _: Path) -> str:
    """An MCP client served with ``serve_mcp`` and no principal."""
    ours, theirs = memory_stream_pair()
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_mcp, theirs, ToolCatalog(mesh))
        async with open_peer(ours, codec=MCP_CODEC) as client:
            params = {"name": "counted__count", "arguments": {}}
            answer = await client.call("tools/call", params, timeout=GUARD)
        tg.cancel_scope.cancel()
    assert answer["isError"] is True, answer
    return str(answer["content"][0]["text"])


async def a2a_task(mesh: MeshOrchestrator, _: Path) -> str:
    """An A2A message from a caller whose identity nobody set."""
    server = A2aServer(mesh)
    data = {"tool": "count", "arguments": {}}
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": data}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    request = HttpRequest("POST", "/", (("a2a-version", "1.0"),), json.dumps(body).encode())
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        response = await server.handle(request, "counted", Caller("ann"))
        tg.cancel_scope.cancel()
    answer = msgspec.json.decode(response.body)
    task = answer["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED", answer
    return json.dumps(task["status"]["message"])


SURFACES: dict[str, Surface] = {
    "call_tool": orchestrator_call,
    "call": orchestrator_call_raw,
    "list_tools": orchestrator_list,
    "ping": orchestrator_ping,
    "broadcast": orchestrator_broadcast,
    "multicast": orchestrator_multicast,
    "authorize": orchestrator_authorize,
    "mesh/call from a link with no agent id": agent_link_without_an_id,
    "a room with no creator": room_without_a_creator,
    "the MCP catalog": mcp_catalog_call,
    "an MCP session": mcp_session,
    "an A2A task": a2a_task,
}


@pytest.mark.parametrize("surface", SURFACES)
async def test_every_surface_refuses_a_call_made_for_nobody(surface: str, tmp_path: Path) -> None:
    async with counted_mesh() as (mesh, counter):
        with anyio.fail_after(GUARD):
            said = await SURFACES[surface](mesh, tmp_path)
        assert "names nobody" in said, said
        assert counter.asked == 0, f"{surface}: the agent was called"
        # The same agent answers a caller that says who it is: the refusal was the door's.
        assert await mesh.as_embedder().call_tool("counted", "count") == 1


async def test_the_embedder_and_a_named_client_are_what_a_caller_says() -> None:
    async with counted_mesh() as (mesh, counter):
        assert await mesh.call_tool("counted", "count", on_behalf_of=EMBEDDER) == 1
        ops = mesh.acting_for(Principal.client("ops"))
        assert ops.principal == Principal.client("ops")
        assert await ops.call_tool("counted", "count") == 2
        ops.check("counted", "tools/call")
        assert counter.asked == 2


async def test_the_daemons_own_reads_read_and_do_nothing_else() -> None:
    from mesh._orchestrator.access import DAEMON

    async with counted_mesh() as (mesh, counter):
        tools = await mesh.list_tools("counted", on_behalf_of=DAEMON)
        assert "count" in {tool["name"] for tool in tools}
        with pytest.raises(Forbidden, match="may send only"):
            await mesh.call_tool("counted", "count", on_behalf_of=DAEMON)
        with pytest.raises(Forbidden, match="may send only"):
            await mesh.call("counted", "room/turn", {}, on_behalf_of=DAEMON)
        assert counter.asked == 0
