"""What every spawning helper shares: how long a child may take to start, how to stop it,
and how to read the line a server prints once it listens."""

from __future__ import annotations

import json
import os
import signal
from contextlib import suppress
from typing import Any

import anyio
import anyio.abc

__all__ = ["ECHO_MODULE", "SPAWN_TIMEOUT", "read_announcement", "stop_process"]

#: Starting a Python process and hearing from it, on a loaded machine: its imports alone
#: took 8-12 s on a 2-core box at load 20 under coverage. Generous, since it only turns a
#: child that never comes up into a failure; a healthy one answers in well under a second.
SPAWN_TIMEOUT = 60.0
#: The live echo agent, as ``python -m`` runs it.
ECHO_MODULE = "mesh.agents.echo"


async def stop_process(process: anyio.abc.Process) -> None:
    if process.returncode is None:
        with suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)  # a test may have stopped it
        process.terminate()
        with anyio.move_on_after(5):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
    await process.aclose()


async def read_announcement(process: anyio.abc.Process) -> dict[str, Any]:
    """The JSON line a server prints on stdout once it listens."""
    assert process.stdout is not None
    line = b""
    with anyio.fail_after(SPAWN_TIMEOUT):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive(1)
            line += chunk
    announced: dict[str, Any] = json.loads(line)
    return announced
