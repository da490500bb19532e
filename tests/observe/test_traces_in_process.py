"""Spans in one process: the orchestrator's CLIENT span, the agent's SERVER span, the tool's
own span beneath it, all one trace; and none at all with tracing off."""

from __future__ import annotations

from pathlib import Path

import anyio
import msgspec
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from mesh import EMBEDDER, Agent, AgentSpec, MeshOrchestrator, local_connector
from mesh._logging import add_trace_ids
from mesh._telemetry import tracing
from mesh.demo.fixtures import DEMO_TOPIC, demo_chat
from mesh.mcp._codec import MCP_CODEC
from mesh.protocol import MESH_CODEC, DecodeFailure, Request, RequestPayload
from mesh.rooms import Limits, RoomManager, RoomSpec
from tests.observe._spans import by_name, one_trace, parent_of, traced
from tests.rooms._helpers import GUARD, seat_agent

pytestmark = pytest.mark.anyio


def worker() -> Agent:
    agent = Agent("worker")

    @agent.tool
    async def work(message: str) -> str:
        with tracing.tracer().start_as_current_span("the tool's own work"):
            return message.upper()

    @agent.tool
    def fail(message: str) -> str:
        raise ValueError("no")

    return agent


async def test_one_call_is_one_trace_and_the_tool_span_is_a_child() -> None:
    with traced() as (_, exporter):
        async with MeshOrchestrator([AgentSpec("worker", local_connector(worker()))]) as mesh:
            assert (
                await mesh.call_tool("worker", "work", {"message": "hi"}, on_behalf_of=EMBEDDER)
                == "HI"
            )
        spans = exporter.get_finished_spans()
    one_trace(spans)
    own = by_name(spans, "the tool's own work")
    server = parent_of(spans, own)
    client = parent_of(spans, server)
    assert (server.kind, client.kind) == (SpanKind.SERVER, SpanKind.CLIENT)
    assert server.name == client.name == "tools/call"
    assert client.attributes is not None and server.attributes is not None
    assert client.attributes["rpc.system.name"] == "agent_mesh"
    assert client.attributes["rpc.method"] == "tools/call"
    assert client.attributes["server.address"] == "worker"
    assert client.attributes["rpc.response.status_code"] == "OK"
    assert server.attributes["server.address"] == "worker"
    assert not any("hi" in str(v) for s in spans for v in (s.attributes or {}).values())


async def test_a_failed_call_says_its_code_not_its_message() -> None:
    with traced() as (_, exporter):
        async with MeshOrchestrator([AgentSpec("worker", local_connector(worker()))]) as mesh:
            with pytest.raises(Exception, match="no"):
                await mesh.call_tool("worker", "fail", {"message": "secret"}, on_behalf_of=EMBEDDER)
        spans = exporter.get_finished_spans()
    client = next(s for s in spans if s.kind is SpanKind.CLIENT)
    assert client.status.status_code is StatusCode.ERROR
    assert client.attributes is not None
    assert client.attributes["error.type"] == "TOOL_ERROR"
    assert "secret" not in repr([s.to_json() for s in spans])


async def test_tracing_off_adds_no_spans_and_nothing_to_the_wire() -> None:
    assert not tracing.active()
    async with MeshOrchestrator([AgentSpec("worker", local_connector(worker()))]) as mesh:
        assert (
            await mesh.call_tool("worker", "work", {"message": "hi"}, on_behalf_of=EMBEDDER) == "HI"
        )
    assert tracing.outgoing() is None
    request = Request(id="x", timestamp=1, payload=RequestPayload(method="ping"))
    assert b"trace" not in MESH_CODEC.encode(request)


async def test_a_room_turn_is_an_invoke_agent_span_over_a_chat_span(tmp_path: Path) -> None:
    alice, bob = demo_chat()
    agents = (seat_agent(alice), seat_agent(bob))
    specs = [AgentSpec(a.id, local_connector(a), name=a.id) for a in agents]
    with traced() as (_, exporter):
        async with (
            MeshOrchestrator(specs) as mesh,
            RoomManager.for_orchestrator(mesh, tmp_path, creator=EMBEDDER) as rooms,
        ):
            spec = RoomSpec(topic=DEMO_TOPIC, members=("alice", "bob"), limits=Limits(max_turns=2))
            created = await rooms.create(spec)
            with anyio.fail_after(GUARD):
                await rooms.wait(created.id)
            transcript = await rooms.transcript(created.id)
        spans = exporter.get_finished_spans()
    turns = [s for s in spans if s.name == "invoke_agent Alice"]
    assert turns, [s.name for s in spans]
    turn = turns[0]
    assert turn.attributes is not None
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == created.id
    chat = next(
        s
        for s in spans
        if s.name.startswith("chat ") and s.context.trace_id == turn.context.trace_id
    )
    server = parent_of(spans, chat)
    client = parent_of(spans, server)
    assert (server.name, client.name) == ("room/turn", "room/turn")
    assert parent_of(spans, client) is turn
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    said = next(m for m in transcript if m.agent_id == "alice").text
    assert chat.attributes["gen_ai.usage.output_tokens"] == len(said.split())
    assert chat.attributes["gen_ai.request.model"] == "scripted"


def test_log_lines_carry_the_current_trace_and_span() -> None:
    assert add_trace_ids(None, "info", {"event": "x"}) == {"event": "x"}
    with traced() as (provider, _):
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("outer") as span:
            line = add_trace_ids(None, "info", {"event": "x"})
    context = span.get_span_context()
    assert line["trace_id"] == f"{context.trace_id:032x}"
    assert line["span_id"] == f"{context.span_id:016x}"


def test_the_envelope_carries_trace_context_and_bounds_it() -> None:
    parent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    request = Request(
        id="1", timestamp=0, payload=RequestPayload(method="ping"), traceparent=parent
    )
    frame = MESH_CODEC.encode(request)
    assert frame.endswith(f',"traceparent":"{parent}"}}'.encode())
    assert MESH_CODEC.decode(frame) == request
    with pytest.raises(DecodeFailure, match="traceparent"):
        MESH_CODEC.decode(frame.replace(parent.encode(), b"x" * 200))


def test_mcp_carries_trace_context_in_meta_both_ways() -> None:
    parent = "00-" + "c" * 32 + "-" + "d" * 16 + "-01"
    payload = RequestPayload(method="tools/call", params={"name": "shout", "arguments": {}})
    request = Request(id="7", timestamp=0, payload=payload, traceparent=parent, tracestate="k=v")
    wire = msgspec.json.decode(MCP_CODEC.encode(request))
    assert wire["params"]["_meta"]["traceparent"] == parent
    assert wire["params"]["_meta"]["tracestate"] == "k=v"
    back = MCP_CODEC.decode(msgspec.json.encode(wire))
    assert isinstance(back, Request)
    assert (back.traceparent, back.tracestate) == (parent, "k=v")
    wire["params"]["_meta"]["traceparent"] = "x" * 200  # out of bounds: no trace, no failure
    assert MCP_CODEC.decode(msgspec.json.encode(wire)).traceparent is None  # type: ignore[union-attr]


def _one_traced_span(name: str) -> list[str]:
    """A span made under a provider of its own; the provider is freed on return."""
    with traced() as (_, exporter):
        with tracing.tracer().start_as_current_span(name):
            pass
        return [s.name for s in exporter.get_finished_spans()]


def test_each_provider_gets_its_own_tracer_even_at_a_freed_ones_address() -> None:
    # A test's provider, shut down and freed, left its id() to the next test's; the mesh
    # kept tracers by id, so the next test's spans went to the dead processor (and were lost).
    for round_ in range(20):
        assert _one_traced_span(f"round {round_}") == [f"round {round_}"]
