"""ONE trace per call across real processes, each exporting with the SDK's OTLP exporter to a
receiver on loopback: ``mesh call`` -> ``mesh serve`` -> an agent over stdio, WebSocket dial-in
and HTTP; the tool's own span under the agent's SERVER span; across two daemons on NATS."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest

from mesh.testing import Daemon, spawn_daemon
from tests.observe._otlp import ReceivedSpan, Receiver, chain, open_receiver

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(180)]

AGENT_MODULE = "tests.observe.traced_agent"
ROOT = Path(__file__).resolve().parents[2]
#: The tool's argument: it must show in no span.
SECRET = "xylophone"


def stdio_manifest(agent_id: str, receiver: Receiver) -> str:
    env = receiver.environment(agent_id)
    env_table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    return f"""
id = "{agent_id}"
[transport]
type = "stdio"
command = "python"
args = ["-m", "{AGENT_MODULE}", "--stdio", "--id", "{agent_id}"]
cwd = "{ROOT}"
env = {{ {env_table} }}
"""


async def mesh_call(daemon: Daemon, receiver: Receiver, agent: str, message: str) -> None:
    """``mesh call AGENT work --arg message=...`` as a process of its own, traced."""
    env = daemon.env(**receiver.environment("mesh-cli"))
    command = [
        sys.executable,
        "-m",
        "mesh.cli",
        "call",
        agent,
        "work",
        "--arg",
        f"message={message}",
    ]
    done = await anyio.run_process(command, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == {"message": message.upper()}


def the_tool_span(spans: list[ReceivedSpan]) -> bool:
    return any(s.name == "the tool's own work" for s in spans)


async def the_whole_trace(receiver: Receiver, *services: str) -> list[ReceivedSpan]:
    """Every span of the call's trace, once the CLI's root span and the tool's span are in."""

    def complete(spans: list[ReceivedSpan]) -> bool:
        tool = [s for s in spans if s.name == "the tool's own work"]
        if not tool:
            return False
        ours = {s.service for s in spans if s.trace_id == tool[0].trace_id}
        return set(services) <= ours and any(
            s.service == "mesh-cli" and not s.parent_id for s in spans
        )

    spans = await receiver.wait_for(complete)
    tool = next(s for s in spans if s.name == "the tool's own work")
    return chain(spans, tool)


def assert_hops(path: list[ReceivedSpan], agent: str) -> None:
    """CLI client -> daemon server -> daemon client -> agent server -> the tool's span."""
    hops = [(s.service, s.kind, s.name) for s in path]
    assert hops == [
        ("mesh-cli", "CLIENT", "tools/call"),
        ("mesh-daemon", "SERVER", "tools/call"),
        ("mesh-daemon", "CLIENT", "tools/call"),
        (agent, "SERVER", "tools/call"),
        (agent, "INTERNAL", "the tool's own work"),
    ], hops
    assert len({s.trace_id for s in path}) == 1
    for span in path[:4]:
        assert span.attributes["rpc.method"] == "tools/call"
        assert span.attributes["rpc.response.status_code"] == "OK"
    shown = json.dumps([s.attributes for s in path]).lower()
    assert SECRET not in shown  # neither the argument nor the result is an attribute


async def test_mesh_call_to_a_stdio_agent_is_one_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_receiver() as receiver:
        (tmp_path / "worker.toml").write_text(stdio_manifest("worker", receiver))
        for key, value in receiver.environment("mesh-daemon").items():
            monkeypatch.setenv(key, value)
        async with spawn_daemon(tmp_path) as daemon:
            await daemon.wait_online("worker")
            await mesh_call(daemon, receiver, "worker", SECRET)
            path = await the_whole_trace(receiver, "mesh-cli", "mesh-daemon", "worker")
    assert_hops(path, "worker")
