"""A daemon serving three kinds of agent, and the a2a-sdk's client on it.

The daemon runs in the test's event loop (``serve_in_process``) on a loopback
port, with the echo agent (a stdio child), a scripted persona (a stdio child that
streams its replies) and ``held``: an agent of the test's own that dials in over
``/ws`` and says, through events, when its ``hold`` tool starts and when it is
cancelled, so a test can see a cancel reach the agent.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import AgentCard, Message, Part, Role, SendMessageRequest
from google.protobuf import json_format, struct_pb2

from mesh import Agent
from mesh._sdk.serve import serve_agent_dial_in
from tests.integration._daemon import InProcessDaemon, persona_manifest, serve_in_process

ECHO = """id = "echo"
capabilities = ["echo"]
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio"]
"""
HELD = 'id = "held"\n[transport]\ntype = "dial-in"\ntoken_env = "A2A_HELD_TOKEN"\n'
HELD_TOKEN = "held-secret-token"
GUARD = 60.0
#: Where these daemons POST push notifications: the tests' own webhooks, on loopback.
WEBHOOK_HOSTS = ("127.0.0.1",)


@dataclass
class Held:
    """The ``held`` agent's signals to the test."""

    started: anyio.Event = field(default_factory=anyio.Event)
    cancelled: anyio.Event = field(default_factory=anyio.Event)

    def agent(self) -> Agent:
        agent = Agent("held", description="Holds a call until it is cancelled.")

        @agent.tool
        async def hold(seconds: float) -> dict[str, float]:
            """Wait ``seconds``, telling the test when it starts and if it is cancelled."""
            self.started.set()
            try:
                await anyio.sleep(seconds)  # the work this tool stands for
            except anyio.get_cancelled_exc_class():
                self.cancelled.set()
                raise
            return {"held": seconds}

        return agent


@dataclass
class Mesh:
    daemon: InProcessDaemon
    held: Held

    def url(self, agent: str) -> str:
        return f"{self.daemon.http}/a2a/{agent}"

    def http(self, token: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token or self.daemon.token}"}
        return httpx.AsyncClient(headers=headers, timeout=30)

    async def token(self, name: str, role: str = "client") -> str:
        async with self.daemon.client() as admin:
            made = await admin.post("/tokens", json={"role": role, "name": name})
            assert made.status_code == 201, made.text
            return str(made.json()["token"])


@asynccontextmanager
async def open_mesh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Mesh]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "echo.toml").write_text(ECHO)
    (manifests / "held.toml").write_text(HELD)
    persona_manifest(manifests, "alice", "Alice", ["Tea, always. {last}"], 0.05)
    monkeypatch.setenv("A2A_HELD_TOKEN", HELD_TOKEN)
    held = Held()
    async with (
        serve_in_process(manifests, tmp_path / "data", webhook_hosts=WEBHOOK_HOSTS) as daemon,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_dial_in, held.agent(), daemon.ws)
        await daemon.wait_online("echo", "held", "alice", timeout=GUARD)
        yield Mesh(daemon, held)
        tg.cancel_scope.cancel()


async def _dial_in(agent: Agent, url: str) -> None:
    await serve_agent_dial_in(agent, url, token=HELD_TOKEN)


@asynccontextmanager
async def sdk_client(
    mesh: Mesh,
    agent: str,
    *,
    version: str = "1.0",
    streaming: bool = True,
    token: str | None = None,
    binding: str = "JSONRPC",
) -> AsyncIterator[tuple[Client, AgentCard]]:
    """The SDK's client for ``agent``, from its card, speaking ``version`` (1.0 or 0.3)
    over ``binding`` (``JSONRPC`` or ``HTTP+JSON``)."""
    async with mesh.http(token) as http:
        card = await A2ACardResolver(http, mesh.url(agent)).get_agent_card()
        chosen = copy.deepcopy(card)
        keep = [
            i
            for i in card.supported_interfaces
            if i.protocol_version == version and i.protocol_binding == binding
        ]
        del chosen.supported_interfaces[:]
        chosen.supported_interfaces.extend(keep)
        config = ClientConfig(
            httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]
        )
        client = ClientFactory(config).create(chosen)
        yield client, card


def tool_message(tool: str, **arguments: Any) -> SendMessageRequest:
    """A message that calls ``tool`` (a data part ``{"tool", "arguments"}``)."""
    data = json_format.ParseDict({"tool": tool, "arguments": arguments}, struct_pb2.Value())
    return SendMessageRequest(
        message=Message(message_id=f"m-{tool}", role=Role.ROLE_USER, parts=[Part(data=data)])
    )


def text_message(text: str, context_id: str = "") -> SendMessageRequest:
    message = Message(message_id="m-text", role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id:
        message.context_id = context_id
    return SendMessageRequest(message=message)


def as_dict(message: Any) -> dict[str, Any]:
    return dict(json_format.MessageToDict(message))
