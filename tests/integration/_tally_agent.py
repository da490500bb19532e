"""An agent that writes down every call it serves: a test's witness that a refused call never ran.

``python tests/integration/_tally_agent.py LOG --stdio [--id ID]``: each served
``tools/call``, ``room/turn`` and ``room/persona`` appends a line to ``LOG``
(pings and tool listings are the daemon's own and are not written). Its tool
``relay`` calls another agent's ``echo`` through the mesh (``mesh/call``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mesh import Agent, RequestContext, run_agent

LOG = Path(sys.argv.pop(1))
agent = Agent("tally", name="Tally")


def _note(what: str) -> None:
    with LOG.open("a") as log:
        log.write(f"{agent.id} {what}\n")


@agent.tool
def echo(message: str) -> dict[str, str]:
    """Say ``message`` back."""
    _note("tools/call echo")
    return {"message": message}


@agent.tool
async def relay(to: str, ctx: RequestContext, timeout: float = 10) -> Any:
    """Call ``to``'s ``echo`` through the mesh, with ``timeout`` as the deadline."""
    _note("tools/call relay")
    arguments = {"name": "echo", "arguments": {"message": f"via {agent.id}"}}
    return await ctx.call_agent(to, "tools/call", arguments, timeout=timeout)


@agent.method("room/persona")
def persona(ctx: RequestContext, params: Any) -> dict[str, str]:
    _note("room/persona")
    return {"id": agent.id, "name": agent.id.title(), "role": "witness"}


@agent.method("room/turn")
def turn(ctx: RequestContext, params: Any) -> dict[str, Any]:
    _note("room/turn")
    return {"room_id": params["room_id"], "turn": params["turn"], "text": f"{agent.id} was here"}


if __name__ == "__main__":
    run_agent(agent)
