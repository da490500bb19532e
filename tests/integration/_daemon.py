"""Running the daemon inside the test's own event loop, with settings a process cannot take."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mesh.daemon import DaemonSettings, serve_daemon
from mesh.testing import SPAWN_TIMEOUT, Daemon, spawn_daemon
from transports import WebSocketStream, open_websocket

#: The limits of a room that must still run when a test (a page, a CLI, a guest) reaches it:
#: 400 turns of the scripted personas. The message limit (20 each by default) would end it
#: at 40 turns whatever ``max_turns`` says, seconds on a fast machine and before the test
#: is there on a loaded one. The test stops the room itself.
LONG_LIMITS: dict[str, int] = {"max_turns": 400, "max_messages_per_agent": 200}


def persona_manifest(
    directory: Path,
    agent_id: str,
    name: str,
    script: list[str],
    delay: float,
    *,
    role: str = "participant",
) -> None:
    """A scripted persona agent over stdio, answering each turn after ``delay`` s."""
    path = directory / f"{agent_id}.toml"
    path.write_text(
        f'''id = "{agent_id}"
name = "{name}"
capabilities = ["chat"]

[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.persona", "--manifest", "{path}", "--stdio"]

[persona]
system_prompt = "You are {name}. Keep it short."
role = "{role}"

[persona.provider]
provider = "scripted"
script = {json.dumps(script)}
delay = {delay}
'''
    )


@dataclass(frozen=True, slots=True)
class InProcessDaemon:
    """The daemon's URLs and the admin token it wrote to ``<data_dir>/admin.token``."""

    http: str
    ws: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self) -> httpx.AsyncClient:
        """An HTTP client on the daemon that presents the admin token."""
        return httpx.AsyncClient(base_url=self.http, headers=self.headers)

    def events_url(self, path: str) -> str:
        """The WebSocket URL of ``path`` with the token in ``?token=`` (as a browser sends it)."""
        return f"{self.ws.removesuffix('/ws')}{path}?token={self.token}"

    def open_events(self, path: str) -> AbstractAsyncContextManager[WebSocketStream]:
        """A WebSocket on ``path`` (``/agents/events``, ``/rooms/ID/events``) with the token."""
        return open_websocket(self.ws.removesuffix("/ws") + path, token=self.token)

    async def wait_online(self, *agent_ids: str, timeout: float = SPAWN_TIMEOUT) -> dict[str, Any]:
        """Until every named agent is online, watching ``/agents/events`` (no polling)."""
        agents: dict[str, Any] = {}
        with anyio.fail_after(timeout):
            async with self.open_events("/agents/events") as events:
                while not all(agents.get(a, {}).get("status") == "online" for a in agent_ids):
                    event = json.loads(await events.receive())
                    shown = event["agents"] if event["type"] == "snapshot" else [event["agent"]]
                    agents.update((agent["id"], agent) for agent in shown)
        return agents


@asynccontextmanager
async def serve_in_process(
    manifests: Path, data_dir: Path, **settings: Any
) -> AsyncIterator[InProcessDaemon]:
    """``serve_daemon`` on a free loopback port in this event loop; cancelled on exit."""
    chosen = DaemonSettings(port=0, manifests=str(manifests), data_dir=str(data_dir), **settings)
    async with anyio.create_task_group() as tg:
        url = await tg.start(partial(serve_daemon, chosen, handle_signals=False))
        # The daemon wrote its admin token before it started listening.
        token = (await (anyio.Path(data_dir) / "admin.token").read_text()).strip()
        yield InProcessDaemon(url, "ws" + url.removeprefix("http") + "/ws", token)
        tg.cancel_scope.cancel()


@asynccontextmanager
async def slow_personas(factory: pytest.TempPathFactory, name: str) -> AsyncIterator[Daemon]:
    """A ``mesh serve`` of two personas whose turns take a minute, so a room stays running
    while a command follows it; a module shares one, each test making a room of its own id."""
    manifests = factory.mktemp(f"{name}-manifests")
    persona_manifest(manifests, "alice", "Alice", ["Tea."], delay=60)  # a turn takes a minute
    persona_manifest(manifests, "bob", "Bob", ["Coffee."], delay=60)
    data = ["--data-dir", str(factory.mktemp(f"{name}-data"))]
    async with spawn_daemon(manifests, extra_args=data) as daemon:
        await daemon.wait_online("alice", "bob")
        yield daemon
