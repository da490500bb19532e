"""The a2a-sdk server peer (``a2a_server.py``) as a process on loopback."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SERVER = HERE / "a2a_server.py"
#: Starting a process that imports the SDK, Starlette and uvicorn takes a while on a loaded box.
START_TIMEOUT = 30.0


@dataclass
class SdkAgent:
    """The running peer: its base URL, its process, and each task it saw cancelled."""

    url: str
    process: anyio.abc.Process
    cancelled: list[str] = field(default_factory=list)
    _seen: anyio.Event = field(default_factory=anyio.Event)

    async def wait_cancelled(self) -> str:
        while not self.cancelled:
            await self._seen.wait()
        return self.cancelled[0]

    async def wait_more(self) -> None:
        """Until one more task is cancelled."""
        await self._seen.wait()

    def _heard(self, line: str) -> None:
        if line.startswith("cancelled "):
            self.cancelled.append(line.removeprefix("cancelled ").strip())
            self._seen.set()
            self._seen = anyio.Event()


@asynccontextmanager
async def spawn_sdk_agent(*, rest: bool = False) -> AsyncIterator[SdkAgent]:
    """The a2a-sdk's server as a process; ``rest``: serving HTTP+JSON only."""
    command = [sys.executable, str(SERVER), "0", *(["rest"] if rest else [])]
    process = await anyio.open_process(
        command, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=None
    )
    try:
        assert process.stdout is not None
        seen = b""
        with anyio.fail_after(START_TIMEOUT):
            while b"\n" not in seen:
                seen += await process.stdout.receive()
        first, pending = seen.split(b"\n", 1)
        agent = SdkAgent(first.decode().removeprefix("listening ").strip().rstrip("/"), process)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read, process.stdout, agent, pending)
            yield agent
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await process.aclose()


async def _read(stream: anyio.abc.ByteReceiveStream, agent: SdkAgent, pending: bytes) -> None:
    try:
        async for chunk in stream:
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                agent._heard(line.decode())
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return
