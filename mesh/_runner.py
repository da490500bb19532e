"""Running an agent as a program: ``python -m mesh.agents.echo --stdio``.

Agent authors end their module with ``run_agent(agent)``; the flags choose the
transport and the event loop. Logging is configured here (an application), never
in the library.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from functools import partial

import anyio

from mesh._agent import Agent
from mesh._logging import configure_logging
from mesh._session import SessionConfig
from transports import DEFAULT_MAX_FRAME_SIZE, open_stdio_server

__all__ = ["run_agent"]


def _parser(agent: Agent) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"agent {agent.id}", description=agent.description or f"Serve the {agent.id!r} agent."
    )
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--stdio", action="store_true", help="serve over stdin/stdout (the default)")
    parser.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default=os.environ.get("MESH_BACKEND", "asyncio"),
        help="event loop (default: $MESH_BACKEND or asyncio)",
    )
    parser.add_argument("--log-level", default=os.environ.get("MESH_LOG_LEVEL", "info"))
    parser.add_argument(
        "--max-frame-size",
        type=int,
        default=DEFAULT_MAX_FRAME_SIZE,
        metavar="BYTES",
        help=f"largest message accepted or sent (default {DEFAULT_MAX_FRAME_SIZE})",
    )
    return parser


async def _serve_stdio(agent: Agent, max_frame_size: int) -> None:
    async with open_stdio_server(max_frame_size=max_frame_size) as stream:
        await agent.serve(stream, config=SessionConfig(max_frame_size=max_frame_size))


def run_agent(agent: Agent, argv: Sequence[str] | None = None) -> None:
    """Parse flags and serve ``agent`` until its transport closes."""
    args = _parser(agent).parse_args(argv)
    # Logs go to stderr: on stdio, stdout carries the protocol.
    configure_logging(level=args.log_level, stream=sys.stderr)
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(partial(_serve_stdio, agent, args.max_frame_size), backend=args.backend)
