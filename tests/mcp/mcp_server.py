"""An MCP server built with the `mcp` SDK (``MCPServer``): the peer the mount tests run against.

``python tests/mcp/mcp_server.py`` serves stdio; ``... http`` serves streamable HTTP on
127.0.0.1 and an ephemeral port (uvicorn says which on stderr once it listens:
``Uvicorn running on http://127.0.0.1:<port>``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.types import JSONRPCMessage, SamplingMessage, TextContent
from pydantic import BaseModel

app = MCPServer("test-peer", instructions="A server the mesh's tests mount.")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


@app.tool()
def boom() -> str:
    """Always fails."""
    raise ValueError("it broke on purpose")


@app.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Report progress `steps` times, then finish."""
    for step in range(steps):
        await ctx.report_progress(step + 1, steps, f"step {step + 1}")
        await anyio.sleep(0.05)
    return "done"


class Favourite(BaseModel):
    colour: str


@app.tool()
async def ask_colour(ctx: Context) -> str:
    """Log a line, ask the client's user a favourite colour, then its model to praise it."""
    await ctx.log("info", "asking for a colour", logger_name="peer")
    answer = await ctx.elicit("Your favourite colour?", Favourite)
    if answer.action != "accept":
        return f"no colour ({answer.action})"
    prompt = SamplingMessage(role="user", content=TextContent(type="text", text=answer.data.colour))
    with warnings.catch_warnings():  # deprecated in 2026-07-28, which this test does not speak
        warnings.simplefilter("ignore")
        praised = await ctx.request_context.session.create_message([prompt], max_tokens=50)
    text = praised.content.text if isinstance(praised.content, TextContent) else "?"
    return f"{answer.data.colour}: {text}"


CANCELLED: list[float] = []
WAITING: list[float] = []


@app.tool()
async def wait(seconds: float) -> str:
    """Sleep (tests cancel it, time it out, or kill the server under it)."""
    WAITING.append(seconds)
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        CANCELLED.append(seconds)
        raise
    finally:
        WAITING.remove(seconds)
    return "woke"


@app.tool()
def waiting() -> int:
    """How many `wait` calls are sleeping now."""
    return len(WAITING)


@app.tool()
def cancelled() -> int:
    """How many `wait` calls were cancelled so far."""
    return len(CANCELLED)


@app.tool()
def blob(size: int) -> str:
    """A string of `size` characters (for answers over a frame limit)."""
    return "x" * size


@app.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@app.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called `name` and say the list changed (both eras' ways)."""

    def extra() -> str:
        return f"{name} here"

    app.add_tool(extra, name=name, description="Added at run time.")
    await ctx.notify_tools_changed()  # 2026-07-28: subscriptions/listen streams
    with contextlib.suppress(Exception):  # the handshake era: a plain notification
        await ctx.request_context.session.send_tool_list_changed()
    return "grown"


@app.tool()
async def cut(ctx: Context) -> str:
    """Report progress, close this call's event stream, then answer: over streamable HTTP
    the answer reaches only a client that resumes the stream with Last-Event-ID."""
    await ctx.report_progress(1, 2, "before the cut")
    await ctx.close_sse_stream()
    await ctx.report_progress(2, 2, "after the cut")
    return "resumed"


@app.resource("note://today", mime_type="text/plain")
def today() -> str:
    """A note the mount passes through."""
    return "buy milk"


@app.prompt()
def greet(name: str) -> str:
    """A prompt the mount passes through."""
    return f"Say hello to {name}."


@app.tool()
async def renote(ctx: Context) -> str:
    """Say the resource and prompt lists changed (the handshake era's notifications)."""
    session = ctx.request_context.session
    await session.send_resource_list_changed()
    await session.send_prompt_list_changed()
    return "renoted"


class MemoryEvents(EventStore):
    """Every event of every stream, kept so a client can resume a stream that was cut."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(len(self.events))
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        if not last_event_id.isdigit() or int(last_event_id) >= len(self.events):
            return None
        stream = self.events[int(last_event_id)][1]
        for event_id, stream_id, message in self.events[int(last_event_id) + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


if __name__ == "__main__":
    # A slow starter (a cold `npx -y`, a JVM): the tests of start-up allowances set this.
    time.sleep(float(os.environ.get("TEST_PEER_START_DELAY", "0")))
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        # An event store and a short retry: a call's stream may be cut and resumed (`cut`).
        app.run(
            transport="streamable-http",
            host="127.0.0.1",
            port=0,
            event_store=MemoryEvents(),
            retry_interval=100,
        )
    else:
        app.run()
