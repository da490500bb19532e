"""The MCP server side in one process: both eras, change notices, and ``/mcp``'s sessions.

A raw MCP client (a :class:`~mesh.Peer` with the MCP codec) talks to :func:`serve_mcp`
over the memory transport, and :class:`McpHttpEndpoint` is called with requests built
by hand, so every refusal is seen exactly.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from mesh import (
    EMBEDDER,
    Agent,
    AgentSpec,
    MeshError,
    MeshOrchestrator,
    RequestContext,
    local_connector,
    open_peer,
)
from mesh.agents.echo import agent as echo_agent
from mesh.mcp import MCP_CODEC, ExtraTool, ToolCatalog, serve_mcp
from mesh.mcp._catalog import LIST_CONCURRENCY
from mesh.mcp._http_server import McpHttpEndpoint
from mesh.mcp._revisions import envelope
from mesh.testing import NotificationRecorder
from transports import HttpRequest, memory_stream_pair

pytestmark = pytest.mark.anyio

MODERN_META = {"_meta": envelope()}


async def twice(arguments: dict[str, Any], caller: Any) -> Any:
    return {"twice": 2 * arguments["n"]}


class Recording:
    """A client's end of the link that keeps every frame it receives, raw."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.frames: list[dict[str, Any]] = []
        self.info, self.max_frame_size = stream.info, stream.max_frame_size
        self.send, self.send_many, self.aclose = stream.send, stream.send_many, stream.aclose
        self.send_nowait = stream.send_nowait

    async def receive(self) -> bytes:
        frame: bytes = await self._stream.receive()
        self.frames.append(json.loads(frame))
        return frame


@asynccontextmanager
async def mcp_client(catalog: ToolCatalog) -> AsyncIterator[tuple[Any, NotificationRecorder]]:
    ours, theirs = memory_stream_pair()
    recorder = NotificationRecorder()
    wire = Recording(ours)
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(serve_mcp, theirs, catalog, on_behalf_of=EMBEDDER))
        async with open_peer(wire, handler=recorder, codec=MCP_CODEC) as peer:
            peer.wire = wire  # type: ignore[attr-defined]
            yield peer, recorder
        tg.cancel_scope.cancel()


@asynccontextmanager
async def mesh_with_catalog() -> AsyncIterator[tuple[MeshOrchestrator, ToolCatalog]]:
    extra = [ExtraTool("twice", "Doubles n.", {"type": "object"}, twice)]
    async with MeshOrchestrator([AgentSpec("echo", local_connector(echo_agent))]) as mesh:
        catalog = ToolCatalog(mesh, extra=extra)
        catalog.attach()
        try:
            yield mesh, catalog
        finally:
            catalog.detach()


async def test_a_handshake_client_is_told_when_agents_come() -> None:
    async with mesh_with_catalog() as (mesh, catalog), mcp_client(catalog) as (peer, heard):
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
        answer = await peer.call("initialize", hello)
        assert answer["protocolVersion"] == "2025-06-18"
        assert answer["capabilities"] == {"tools": {"listChanged": True}, "logging": {}}
        old = await peer.call("initialize", {**hello, "protocolVersion": "1999-01-01"})
        assert old["protocolVersion"] == "2025-11-25"  # we offer ours; the client decides
        peer.notify_nowait("notifications/initialized")
        listed = await peer.call("tools/list")
        assert {t["name"] for t in listed["tools"]} >= {"echo__echo", "twice"}
        assert "resultType" not in listed
        called = await peer.call("tools/call", {"name": "twice", "arguments": {"n": 4}})
        assert called["structuredContent"] == {"twice": 8}
        mesh.add_agent(AgentSpec("echo2", local_connector(echo_agent)))
        with anyio.fail_after(10):
            await heard.wait_for("notifications/tools/list_changed")
        listed = await peer.call("tools/list")
        assert "echo2__echo" in {t["name"] for t in listed["tools"]}
        # an agent's progress reaches the client under the token the client chose
        arguments = {"seconds": 0.3, "progress_every": 0.1}
        slow = {"name": "echo__sleep", "arguments": arguments, "_meta": {"progressToken": "t"}}
        assert (await peer.call("tools/call", slow))["isError"] is False
        # (a Peer hands progress for tokens it did not mint to no one: read the wire)
        updates = [
            f["params"] for f in peer.wire.frames if f.get("method") == "notifications/progress"
        ]
        assert updates and updates[0]["progressToken"] == "t" and updates[0]["total"] == 0.3


async def test_a_2026_client_discovers_and_listens() -> None:
    async with mesh_with_catalog() as (mesh, catalog), mcp_client(catalog) as (peer, heard):
        found = await peer.call("server/discover", MODERN_META)
        assert found["supportedVersions"] == ["2026-07-28"] and found["resultType"] == "complete"
        listed = await peer.call("tools/list", MODERN_META)
        assert (listed["resultType"], listed["ttlMs"]) == ("complete", 0)
        with pytest.raises(MeshError) as refused:
            await peer.call("tools/list", {"_meta": envelope("2030-01-01")})
        assert refused.value.code == -32022
        assert refused.value.data == {"supported": ["2026-07-28"], "requested": "2030-01-01"}
        async with anyio.create_task_group() as tg:
            listen = {"notifications": {"toolsListChanged": True}, **MODERN_META}
            tg.start_soon(partial(peer.call, "subscriptions/listen", listen))
            with anyio.fail_after(10):
                ack = await heard.wait_for("notifications/subscriptions/acknowledged")
                assert ack["notifications"] == {"toolsListChanged": True}
                mesh.add_agent(AgentSpec("echo2", local_connector(echo_agent)))
                changed = await heard.wait_for("notifications/tools/list_changed")
            assert changed["_meta"] == ack["_meta"]  # stamped with the listen request's id
            tg.cancel_scope.cancel()  # the client ends its stream by cancelling the request


def post(body: Any, session: str | None = None, accept: str = "application/json") -> HttpRequest:
    headers = [("content-type", "application/json"), ("accept", accept)]
    if session is not None:
        headers.append(("mcp-session-id", session))
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return HttpRequest("POST", "/mcp", tuple(headers), raw)


async def test_the_http_endpoint_keeps_sessions_and_refuses_plainly() -> None:
    async with mesh_with_catalog() as (mesh, catalog):
        endpoint = McpHttpEndpoint(catalog, max_sessions=2, max_sessions_per_owner=2)
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
        opened = await endpoint.handle(
            post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        )
        assert opened.status == 200
        session = dict(opened.headers)["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await endpoint.handle(post(initialized, session))).status == 202
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        assert json.loads((await endpoint.handle(post(ping, session))).body)["result"] == {}
        assert (await endpoint.handle(post(ping))).status == 400  # no session
        assert (await endpoint.handle(post(ping, "forged"))).status == 404
        modern = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": MODERN_META}
        assert (await endpoint.handle(post(modern))).status == 200  # needs no session
        listen = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "subscriptions/listen",
            "params": MODERN_META,
        }
        refused = json.loads((await endpoint.handle(post(listen))).body)
        assert "mesh mcp" in refused["error"]["message"]
        # a change rides in front of the session's next answer, as an event
        mesh.add_agent(AgentSpec("echo2", local_connector(echo_agent)))
        with anyio.fail_after(10):
            await catalog.wait_changed(0)
        sse = await endpoint.handle(post(ping, session, "application/json, text/event-stream"))
        assert sse.content_type == "text/event-stream"
        events = [
            json.loads(line[6:])
            for line in sse.body.decode().splitlines()
            if line.startswith("data: ")
        ]
        assert [e.get("method") for e in events] == ["notifications/tools/list_changed", None]
        assert events[1]["result"] == {}
        # bounded: a third session of one owner pushes out its least recently used
        for _ in range(2):
            await endpoint.handle(
                post({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": hello})
            )
        assert endpoint.sessions == 2
        assert (await endpoint.handle(post(ping, session))).status == 404
        bad = await endpoint.handle(post(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]'))
        assert bad.status == 400 and b"batches" in bad.body
        delete = HttpRequest("DELETE", "/mcp", (("mcp-session-id", "gone"),))
        assert (await endpoint.handle(delete)).status == 404


async def test_a_session_belongs_to_its_owner_and_rights_filter_tools() -> None:
    def only_twice(agent: str | None, tool: str) -> None:
        if tool != "twice":
            raise MeshError(f"not for you: {agent}/{tool}")

    async with mesh_with_catalog() as (_, catalog):
        endpoint = McpHttpEndpoint(catalog)
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
        opened = await endpoint.handle(
            post(init), owner="ann", on_behalf_of=EMBEDDER, authorize=only_twice
        )
        session = dict(opened.headers)["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        theirs = await endpoint.handle(post(listing, session), owner="bob", on_behalf_of=EMBEDDER)
        assert theirs.status == 404  # bob cannot use ann's session, nor learn that it exists
        mine = json.loads(
            (await endpoint.handle(post(listing, session), owner="ann", on_behalf_of=EMBEDDER)).body
        )
        assert [tool["name"] for tool in mine["result"]["tools"]] == ["twice"]
        call = {"name": "echo__echo", "arguments": {"message": "x"}}
        refused = await endpoint.handle(
            post({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}, session),
            owner="ann",
        )
        answer = json.loads(refused.body)["result"]
        assert answer["isError"] is True and "not for you" in answer["content"][0]["text"]
        delete = HttpRequest("DELETE", "/mcp", (("mcp-session-id", session),))
        assert (await endpoint.handle(delete, owner="bob")).status == 404
        assert (await endpoint.handle(delete, owner="ann")).status == 204


class SlowLists(Agent):
    """Answers ``tools/list`` once its gate opens, and counts how often it was asked."""

    def __init__(self, agent_id: str, gate: anyio.Event, asked: dict[str, int]) -> None:
        super().__init__(agent_id)
        self._gate, self._asked = gate, asked
        self.tool(self.hello)

    def hello(self) -> str:
        """Says hello."""
        return "hello"

    def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        answer = super().handle_request(ctx, method, params)
        if method != "tools/list":
            return answer
        self._asked[self.id] = self._asked.get(self.id, 0) + 1
        return self._after_gate(answer)

    async def _after_gate(self, answer: Any) -> Any:
        await self._gate.wait()
        return answer


async def test_clients_that_list_together_ask_each_agent_once_and_a_few_at_a_time() -> None:
    """However many MCP clients list while a listing is being made, each agent is asked
    once; and no more than ``LIST_CONCURRENCY`` agents are asked at the same time."""
    gate, asked = anyio.Event(), dict[str, int]()
    count = LIST_CONCURRENCY + 8
    specs = [
        AgentSpec(f"a{i:02d}", local_connector(SlowLists(f"a{i:02d}", gate, asked)))
        for i in range(count)
    ]
    async with MeshOrchestrator(specs) as mesh:
        catalog = ToolCatalog(mesh)
        catalog.attach()
        listings: list[list[dict[str, Any]]] = []

        async def list_tools() -> None:
            listings.append(await catalog.list_tools())

        try:
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for _ in range(10):
                        tg.start_soon(list_tools)
                    await wait_all_tasks_blocked()
                    assert len(asked) == LIST_CONCURRENCY  # the first ones, held at the gate
                    gate.set()
        finally:
            catalog.detach()
    assert asked == {f"a{i:02d}": 1 for i in range(count)}
    assert len(listings) == 10 and all(len(listing) == count for listing in listings)
