"""The MCP conformance suite's everything-server tools, written as a mesh agent.

The suite (``tests/mcp/_conformance.py``) calls tools by fixed names
(``test_simple_text``, ``test_image_content``...); this agent offers them with the
mesh's agent SDK, so the suite measures what the mesh carries of MCP through
``/mcp/conf`` (its own names) and ``/mcp`` (``conf__test_simple_text``...).

Run it with ``python tests/mcp/conformance_agent.py --stdio``.
"""

from __future__ import annotations

import anyio

from mesh import Agent, RequestContext, run_agent

agent = Agent(
    "conf",
    name="Conformance",
    description="The MCP conformance suite's everything-server tools.",
    capabilities=["test"],
)

#: A 1x1 red PNG, as the suite's image scenarios ask.
RED_PIXEL_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
)


@agent.tool
def test_simple_text() -> str:
    """A plain text answer."""
    return "This is a simple text response for testing."


@agent.tool
def test_error_handling() -> str:
    """Always fails, so the client sees isError."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@agent.tool
async def test_tool_with_progress(ctx: RequestContext) -> str:
    """Reports 0, 50 and 100 of 100, ~50 ms apart."""
    for step in (0, 50, 100):
        ctx.report_progress(step, 100)
        if step < 100:
            await anyio.sleep(0.05)
    return "Progress reported: 0, 50, 100 of 100"


if __name__ == "__main__":
    run_agent(agent)
