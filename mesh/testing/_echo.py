"""The live echo agent as a child process: over stdio, or as an HTTP/WebSocket server."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.abc
import sniffio

from mesh._rpc.connect import open_stdio_peer
from mesh._rpc.peer import Peer
from mesh._rpc.session import SessionConfig
from mesh.testing._process import ECHO_MODULE, SPAWN_TIMEOUT, read_announcement, stop_process
from mesh.testing._recorder import NotificationRecorder

__all__ = ["EchoServer", "echo_agent_command", "open_echo_agent", "spawn_echo_server"]


def echo_agent_command(*extra: str, backend: str | None = None) -> tuple[str, list[str]]:
    """The command line that runs the live echo agent over stdio with this Python.

    ``backend`` (``"asyncio"`` or ``"trio"``) picks the agent's event loop; tests pass
    ``sniffio.current_async_library()`` to run it on their own.
    """
    chosen = ["--backend", backend] if backend is not None else []
    return sys.executable, ["-m", ECHO_MODULE, "--stdio", *chosen, *extra]


@asynccontextmanager
async def open_echo_agent(
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
    backend: str | None = None,
    extra_args: Sequence[str] = (),
) -> AsyncIterator[Peer]:
    """Start the live echo agent as a child process and connect to it over stdio.

    ``backend`` picks the agent's event loop (default: the caller's).
    """
    command, args = echo_agent_command(
        *extra_args, backend=backend or sniffio.current_async_library()
    )
    async with open_stdio_peer(
        command, args, agent="echo", config=config, handler=handler, connect_timeout=SPAWN_TIMEOUT
    ) as peer:
        yield peer


@dataclass(frozen=True, slots=True)
class EchoServer:
    """The echo agent as a network server: where to reach it, and its process."""

    http: str
    ws: str
    process: anyio.abc.Process
    token: str | None


@asynccontextmanager
async def spawn_echo_server(
    *,
    token: str | None = None,
    backend: str | None = None,
    address: str = "127.0.0.1:0",
    extra_args: Sequence[str] = (),
    module: str = ECHO_MODULE,
) -> AsyncIterator[EchoServer]:
    """Run ``python -m mesh.agents.echo --http ADDRESS`` (port 0: any) and yield its addresses.

    ``module`` runs another agent module the same way (one that adds tools to the echo
    agent, say); it must take ``run_agent``'s flags and be importable from here.
    """
    command = sys.executable
    args = ["-m", module, "--http", address]
    args += ["--backend", backend or sniffio.current_async_library()]
    env = dict(os.environ)
    if token is not None:
        args += ["--token-env", "ECHO_TOKEN"]
        env["ECHO_TOKEN"] = token
    process = await anyio.open_process([command, *args, *extra_args], env=env, stderr=None)
    try:
        announced = await read_announcement(process)
        yield EchoServer(announced["http"], announced["ws"], process, token)
    finally:
        with anyio.CancelScope(shield=True):
            await stop_process(process)
