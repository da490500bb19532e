"""An ADK agent served over A2A by ADK's own ``to_a2a`` under uvicorn: a script of the ADK peer
virtualenv (``make adk``), started by tests/a2a/test_adk.py and mounted there as a mesh agent.

``python served.py [PORT [AGENT]]`` listens on loopback (port 0: any) and says ``listening URL``
on stdout. Each agent is a ``BaseAgent`` of its own rather than an ``LlmAgent``, so it needs no
model and answers the same every time:

- ``reverser`` (the default): the last line of the text it is sent, reversed. (A room's turn
  is the room's lines since the agent last spoke, so in a room it answers the line said last.)
- ``booker``: asks "Where to?" the way ADK asks for input, a long-running function call
  (``ask_traveller``) that rests its A2A task in ``INPUT_REQUIRED``; the function's response,
  when it comes, is the answer: ``booked <its text>``.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import uuid
import warnings
from collections.abc import AsyncGenerator

import uvicorn
from google.adk.a2a.utils.agent_to_a2a import to_a2a
from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event
from google.genai import types

#: ADK marks its A2A classes experimental with a warning on each use; said once is enough.
warnings.filterwarnings("ignore", message=".*EXPERIMENTAL.*")


class Reverser(BaseAgent):
    """Says the last line of what it is told, backwards."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        parts = (ctx.user_content.parts if ctx.user_content else None) or ()
        text = "\n".join(p.text for p in parts if p.text)
        last = text.strip().splitlines()[-1] if text.strip() else ""
        reply = types.Content(role="model", parts=[types.Part(text=last[::-1])])
        yield Event(author=self.name, invocation_id=ctx.invocation_id, content=reply)


class Booker(BaseAgent):
    """Asks where to, as a long-running function call, and books where it is told."""

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        parts = (ctx.user_content.parts if ctx.user_content else None) or ()
        answers = [p.function_response for p in parts if p.function_response]
        if answers:
            where = (answers[0].response or {}).get("text", answers[0].response)
            said = types.Content(role="model", parts=[types.Part(text=f"booked {where}")])
            yield Event(author=self.name, invocation_id=ctx.invocation_id, content=said)
            return
        call = types.FunctionCall(
            id=f"ask-{uuid.uuid4()}", name="ask_traveller", args={"question": "Where to?"}
        )
        asks = types.Content(role="model", parts=[types.Part(function_call=call)])
        yield Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            content=asks,
            long_running_tool_ids={call.id},
        )


def agent(name: str) -> BaseAgent:
    """The agent named on the command line."""
    if name == "booker":
        return Booker(name="booker", description="Asks where to, then books it.")
    return Reverser(name="reverser", description="Says what it is told, backwards.")


async def main(port: int, name: str) -> None:
    # Bound first, so that the card can name the port the system chose.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    port = sock.getsockname()[1]
    app = to_a2a(agent(name), host="127.0.0.1", port=port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(f"listening http://127.0.0.1:{port}", flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    asyncio.run(main(port, sys.argv[2] if len(sys.argv) > 2 else "reverser"))
