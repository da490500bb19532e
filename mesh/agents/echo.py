"""The live echo agent: the mesh's reference agent and its integration-test partner.

Run it with ``python -m mesh.agents.echo --stdio``. Its tools exercise every path
of the protocol: plain results (``echo``, ``reverse``), long cancellable work with
progress (``sleep``), errors (``fail``), size limits (``blob``) and the way back to
the caller mid-call: a log line (``chatter``), a question for a person (``ask``) and
one for the caller's model (``think``).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated

import anyio
import msgspec

from mesh import Agent, RequestContext, run_agent

agent = Agent(
    "echo",
    name="Echo",
    description="Says things back, sleeps on request, fails on request.",
    capabilities=["echo", "test"],
)

Seconds = Annotated[float, msgspec.Meta(ge=0, le=3600, description="how long, in seconds")]


Reply = dict[str, str]


@agent.tool
def echo(message: str, delay: Seconds = 0.0) -> Reply | Awaitable[Reply]:
    """Return the message unchanged, after an optional delay."""
    reply = {"message": message}
    # A plain def answers inline, with no task; only a delayed echo needs one.
    return _later(delay, reply) if delay else reply


async def _later(delay: float, reply: Reply) -> Reply:
    await anyio.sleep(delay)
    return reply


@agent.tool
def reverse(text: str) -> dict[str, str]:
    """Return the text reversed."""
    return {"text": text[::-1]}


@agent.tool
async def sleep(
    seconds: Seconds, ctx: RequestContext, progress_every: Seconds = 0.0
) -> dict[str, float]:
    """Sleep, reporting progress every ``progress_every`` seconds if set.

    If the caller cancels (or its deadline passes), the agent sends the
    notification ``echo/cancelled`` with the request id, so tests can see that
    cancellation really reached the handler.
    """
    try:
        if progress_every <= 0:
            await anyio.sleep(seconds)
        else:
            slept = 0.0
            while slept < seconds:
                step = min(progress_every, seconds - slept)
                await anyio.sleep(step)
                slept += step
                ctx.report_progress(slept, seconds, f"slept {slept:g} of {seconds:g} s")
    except anyio.get_cancelled_exc_class():
        ctx.notify_nowait("echo/cancelled", {"id": ctx.request_id})
        raise
    return {"slept": seconds}


@agent.tool
async def fail(message: str) -> None:
    """Raise an exception with this message (the caller gets a ToolError)."""
    raise RuntimeError(message)


@agent.tool
async def relay(to: str, message: str, ctx: RequestContext) -> dict[str, str]:
    """Ask agent ``to`` (through the mesh) to echo ``message``; return who answered what."""
    reply = await ctx.call_agent(
        to, "tools/call", {"name": "echo", "arguments": {"message": message}}
    )
    return {"from": to, "message": reply["message"]}


@agent.tool
async def blob(size: Annotated[int, msgspec.Meta(ge=0, le=64 * 1024 * 1024)]) -> dict[str, str]:
    """Return a string of ``size`` bytes (to test size limits)."""
    return {"data": "x" * size}


@agent.tool
def chatter(message: str, ctx: RequestContext) -> dict[str, str]:
    """Log ``message`` to the caller at level info, then echo it."""
    ctx.log("info", message, logger="echo")
    return {"message": message}


@agent.tool
async def ask(question: str, ctx: RequestContext) -> dict[str, object]:
    """Ask the caller ``question`` (one string field, ``answer``); return what came back."""
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    got = await ctx.elicit(question, schema)
    return {"action": got.action, "answer": (got.content or {}).get("answer")}


@agent.tool
async def think(prompt: str, ctx: RequestContext) -> dict[str, object]:
    """Ask the caller's model to answer ``prompt``; return its text and model."""
    sampled = await ctx.sample(prompt, max_tokens=100)
    return {"text": sampled.content.get("text"), "model": sampled.model}


if __name__ == "__main__":
    run_agent(agent)
