"""The tour's last stop: one call's trace, as a tree, from the OpenTelemetry SDK's in-memory
exporter (docs/observability.md).

``front`` is asked for a tool that asks ``echo`` through the mesh (``mesh/call``): the
tree shows each hop (the orchestrator's CLIENT span, the agent's SERVER span, the
mesh's routing of the agent's own call) with its duration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mesh import Agent, AgentSpec, MeshOrchestrator, RequestContext, local_connector
from mesh._telemetry import tracing
from mesh.agents.echo import agent as echo
from mesh.demo._sdk_tour import say


def _front() -> Agent:
    front = Agent("front", description="asks echo, through the mesh")

    @front.tool
    async def ask(message: str, ctx: RequestContext) -> dict[str, Any]:
        """Have ``echo`` echo ``message``; a span of this tool's own wraps the hop."""
        with tracing.span("front thinks"):
            answer = await ctx.call_agent(
                "echo", "tools/call", {"name": "echo", "arguments": {"message": message}}
            )
        return {"echo said": answer["message"]}

    return front


def render(spans: Sequence[Any]) -> list[str]:
    """The spans of one trace as an indented tree: name, kind, where, duration."""
    children: dict[int | None, list[Any]] = {}
    ids = {s.context.span_id for s in spans}
    for span in sorted(spans, key=lambda s: s.start_time):
        parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        children.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in children.get(parent, []):
            attributes = span.attributes or {}
            where = attributes.get("server.address", "")
            kind = span.kind.name.lower()
            took = (span.end_time - span.start_time) / 1e6
            at = f" -> {where}" if where else ""
            lines.append(f"{'  ' * depth}{span.name} [{kind}{at}] {took:.2f} ms")
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return lines


async def trace_tour() -> None:
    say("\n== one call, traced (OpenTelemetry, the SDK's in-memory exporter) ==")
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        say("(the OpenTelemetry SDK is not installed: pip install opentelemetry-sdk)")
        return
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        specs = [
            AgentSpec("front", local_connector(_front())),
            AgentSpec("echo", local_connector(echo)),
        ]
        async with MeshOrchestrator(specs) as mesh:
            exporter.clear()  # the links' own set-up is not the call
            answer = await mesh.call_tool("front", "ask", {"message": "where did I go?"})
    finally:
        tracing.use_tracer_provider(None)
    spans = exporter.get_finished_spans()
    traces = {s.context.trace_id for s in spans}
    if len(traces) != 1:
        raise SystemExit(f"the call made {len(traces)} traces, not one")
    say(f"mesh.call_tool('front', 'ask') -> {answer}")
    say(f"trace {traces.pop():032x}:")
    for line in render(spans):
        say(f"  {line}")
