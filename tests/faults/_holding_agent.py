"""The echo agent plus ``hold``: a tool that says on stdout that it started, then sleeps.

Run as ``python -m tests.faults._holding_agent --http 127.0.0.1:0``. After the
``listening`` line, each started ``hold`` prints ``holding``: a test that reads them
knows its calls are in the agent's hands, over a transport (HTTP) that has no order
and no way to say so itself.
"""

from __future__ import annotations

import anyio

from mesh import run_agent
from mesh.agents.echo import Seconds, agent


@agent.tool
async def hold(seconds: Seconds) -> dict[str, float]:
    """Announce the call on stdout, then do what echo's ``sleep`` does."""
    print("holding", flush=True)
    await anyio.sleep(seconds)  # the work this tool stands for, not a test waiting
    return {"slept": seconds}


if __name__ == "__main__":
    run_agent(agent)
