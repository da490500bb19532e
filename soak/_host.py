"""Many echo agents in one process, for the soak: HTTP and WebSocket servers, or dial-ins.

``python -m soak._host serve --ids a,b --ws-token-env VAR`` serves each id on its own
loopback port (``POST /rpc`` and ``/ws``, the WebSocket ones token-protected) and
prints ``{"id": {"http": URL, "ws": URL}, ...}`` once all listen.
``python -m soak._host dial-in --ids a,b --url WS`` dials each id in to the daemon,
with the token in ``$SOAK_TOKEN_<ID>``. One process holds them all: fifty agent
processes would measure the machine, not the mesh.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable
from contextlib import AsyncExitStack
from functools import partial

import anyio

from mesh import Agent, open_agent_server
from mesh._logging import configure_logging
from mesh._sdk.serve import serve_agent_dial_in
from transports import TokenAuthenticator


def echo_agent(agent_id: str) -> Agent:
    """The echo agent's two tools the soak calls, under its own id."""
    agent = Agent(agent_id, capabilities=["echo", "soak"])

    @agent.tool
    def echo(message: str) -> dict[str, str]:
        """Return the message."""
        return {"message": message}

    @agent.tool
    def slow(message: str, seconds: float = 0.0) -> Awaitable[dict[str, str]]:
        """Return the message after a while."""
        return _later(seconds, {"message": message})

    return agent


async def _later(seconds: float, reply: dict[str, str]) -> dict[str, str]:
    await anyio.sleep(seconds)
    return reply


def token_variable(agent_id: str) -> str:
    return "SOAK_TOKEN_" + agent_id.upper().replace("-", "_")


async def serve(ids: list[str], ws_token: str) -> None:
    async with AsyncExitStack() as stack:
        where: dict[str, dict[str, str]] = {}
        for agent_id in ids:
            agent = echo_agent(agent_id)
            tokens = TokenAuthenticator({ws_token: agent_id})
            server = await stack.enter_async_context(open_agent_server(agent, tokens=tokens))
            where[agent_id] = {"http": server.url, "ws": server.ws_url + "/ws"}
        print(json.dumps(where), flush=True)
        await anyio.sleep_forever()


async def dial_in(ids: list[str], url: str) -> None:
    async with anyio.create_task_group() as tg:
        for agent_id in ids:
            token = os.environ[token_variable(agent_id)]
            tg.start_soon(partial(serve_agent_dial_in, echo_agent(agent_id), url, token=token))
        print(json.dumps({"dialling": ids}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m soak._host")
    parser.add_argument("mode", choices=("serve", "dial-in"))
    parser.add_argument("--ids", required=True, help="comma-separated agent ids")
    parser.add_argument("--url", help="the daemon's /ws (dial-in)")
    parser.add_argument("--ws-token-env", default="SOAK_WS_TOKEN")
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"))
    args = parser.parse_args()
    configure_logging(level="warning", stream=sys.stderr)
    ids = args.ids.split(",")
    if args.mode == "serve":
        anyio.run(serve, ids, os.environ[args.ws_token_env], backend=args.backend)
    else:
        anyio.run(dial_in, ids, args.url, backend=args.backend)


if __name__ == "__main__":
    main()
