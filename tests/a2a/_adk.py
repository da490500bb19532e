"""The Google ADK peer: its own virtualenv (``tests/a2a/adk/.venv``, built by ``make adk`` from
``tests/a2a/adk/requirements.txt``) and the scripts run in it, as processes on loopback.

google-adk pins a websockets and an opentelemetry older than the mesh's, so it cannot be
installed beside the mesh; it runs as a peer process instead, as the npm MCP peers do. Without
that virtualenv the tests skip and say how to build it, unless ``MESH_REQUIRE_ADK=1`` (set by
``make test``) or ``CI`` makes a missing peer a failure.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

HERE = Path(__file__).resolve().parent / "adk"
PYTHON = HERE / ".venv" / "bin" / "python"
#: The ADK's import alone (google-genai, pydantic models, the a2a-sdk) takes seconds; more on a
#: loaded machine.
START_TIMEOUT = 60.0


def adk_python() -> Path:
    """The ADK virtualenv's python: skips without it, or fails where the suite must be whole."""
    if PYTHON.exists():
        return PYTHON
    missing = f"the Google ADK peer is not installed ({PYTHON} is missing): run `make adk`"
    if os.environ.get("MESH_REQUIRE_ADK") == "1" or os.environ.get("CI"):
        pytest.fail(missing)
    pytest.skip(missing)


def _env(**extra: str) -> dict[str, str]:
    """The peer's environment: the caller's, less what would point it at the mesh's venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


async def run_remote(token: str, *asks: tuple[str, str]) -> list[dict[str, Any]]:
    """``adk/remote.py``: ADK's RemoteA2aAgent sends each ``(url, text)``; what it heard of each."""
    command = [str(adk_python()), str(HERE / "remote.py")]
    command += [item for pair in asks for item in pair]
    done = await anyio.run_process(command, env=_env(MESH_TOKEN=token), check=False)
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    return [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]


@dataclass
class AdkAgent:
    """``adk/served.py`` running: its base URL and its process."""

    url: str
    process: anyio.abc.Process


@asynccontextmanager
async def spawn_adk_agent(agent: str = "reverser") -> AsyncIterator[AdkAgent]:
    """``adk/served.py``: ADK's ``agent`` served by ``to_a2a`` under uvicorn, as a process."""
    process = await anyio.open_process(
        [str(adk_python()), str(HERE / "served.py"), "0", agent], env=_env(), stderr=None
    )
    try:
        assert process.stdout is not None
        seen = b""
        with anyio.fail_after(START_TIMEOUT):
            while b"\n" not in seen:
                chunk = await process.stdout.receive()
                seen += chunk
        first = seen.split(b"\n", 1)[0].decode()
        yield AdkAgent(first.removeprefix("listening ").strip(), process)
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.aclose()
