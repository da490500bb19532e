"""The echo agent plus a tool that makes a span of its own, as a tool author would:
through OpenTelemetry's global API, with no idea of the mesh's tracing.

Run as ``python -m tests.observe.traced_agent --stdio`` (or ``--http``, ``--connect``).
"""

from __future__ import annotations

from opentelemetry import trace

from mesh import run_agent
from mesh.agents.echo import agent

tracer = trace.get_tracer("traced_agent")


@agent.tool
async def work(message: str) -> dict[str, str]:
    """Upper-case ``message`` inside a span of the tool's own."""
    with tracer.start_as_current_span("the tool's own work"):
        return {"message": message.upper()}


if __name__ == "__main__":
    run_agent(agent)
