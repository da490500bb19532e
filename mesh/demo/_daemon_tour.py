"""The daemon part of ``make demo``: ``mesh serve`` with the shipped manifests.

Starts the two network echo agents the shipped manifests point at (HTTP on 8701,
WebSocket on 8702 with a fresh token), starts ``mesh serve`` on those manifests,
calls the echo agent over stdio, HTTP and WebSocket through the daemon, relays
one agent to another, broadcasts, prints ``mesh agents``, then SIGTERMs the
daemon and checks it exits 0.
"""

from __future__ import annotations

import json
import secrets
import signal
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx

from mesh.testing import Daemon, spawn_daemon, spawn_echo_server

# mesh/demo/ -> the repository root, where the shipped manifests/ live.
MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
AGENTS = ("echo-stdio", "echo-http", "echo-ws")


def say(text: str = "") -> None:
    print(text, flush=True)


async def _wait_online(http: httpx.AsyncClient) -> None:
    with anyio.fail_after(30):
        while True:
            agents = {a["id"]: a["status"] for a in (await http.get("/agents")).json()["agents"]}
            if all(agents.get(agent) == "online" for agent in AGENTS):
                return
            await anyio.sleep(0.1)


async def _call(http: httpx.AsyncClient, agent: str, tool: str, **arguments: Any) -> Any:
    body = {
        "agent": agent,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    reply = await http.post("/rpc", json=body)
    payload = reply.json()
    return payload.get("result", payload.get("error"))


async def _mesh_cli(daemon: Daemon, *args: str) -> str:
    done = await anyio.run_process(
        [sys.executable, "-m", "mesh.cli", *args], env=daemon.env(), check=True
    )
    return done.stdout.decode()


async def daemon_tour() -> None:
    say("\n== mesh serve with the shipped manifests ==")
    token = secrets.token_urlsafe(16)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(
            spawn_echo_server(address="127.0.0.1:8701", extra_args=["--log-level", "warning"])
        )
        await stack.enter_async_context(
            spawn_echo_server(
                address="127.0.0.1:8702", token=token, extra_args=["--log-level", "warning"]
            )
        )
        daemon = await stack.enter_async_context(
            spawn_daemon(
                MANIFESTS, env={"ECHO_WS_TOKEN": token}, extra_args=["--log-level", "warning"]
            )
        )
        http = await stack.enter_async_context(daemon.client())
        say(f"  daemon listening on {daemon.http} (HTTP API) and {daemon.ws} (agents dial in)")
        say(f"  its admin token is in {daemon.data_dir}/admin.token; the CLI finds it there")
        async with httpx.AsyncClient(base_url=daemon.http) as stranger:
            refused = await stranger.get("/agents")
        say(f"  GET /agents without a token -> {refused.status_code} {refused.json()['error']}")
        await _wait_online(http)
        for agent in AGENTS:
            result = await _call(
                http, agent, "echo", message=f"hello over {agent.removeprefix('echo-')}"
            )
            say(f"  POST /rpc {agent:<11} -> {json.dumps(result)}")
        relayed = await _call(http, "echo-stdio", "relay", to="echo-ws", message="passed along")
        say(f"  echo-stdio relays to echo-ws -> {json.dumps(relayed)}")
        cast = await http.post(
            "/broadcast",
            json={
                "method": "tools/call",
                "params": {"name": "reverse", "arguments": {"text": "mesh"}},
            },
        )
        say("  POST /broadcast reverse('mesh'):")
        for agent, answer in cast.json()["agents"].items():
            say(f"    {agent:<11} {json.dumps(answer)}")
        say("  $ mesh agents")
        for line in (await _mesh_cli(daemon, "agents")).splitlines():
            say(f"    {line}")
        daemon.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(20):
            code = await daemon.process.wait()
        say(f"  SIGTERM -> the daemon drained, stopped its child, exited with status {code}")
        if code != 0:
            raise SystemExit(f"the daemon exited with status {code}")
