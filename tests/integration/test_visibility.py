"""Every configured agent is visible from the first moment, with where it stands and why."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import anyio
import httpx
import pytest

from mesh import Agent
from mesh.testing import spawn_daemon
from transports import open_websocket

pytestmark = pytest.mark.anyio

DIAL_IN_TOKEN = "a-dial-in-token"


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def manifests(directory: Path) -> None:
    port = closed_port()
    (directory / "echo-http.toml").write_text(
        f'id = "echo-http"\n[transport]\ntype = "http"\nendpoint = "http://127.0.0.1:{port}"\n'
    )
    (directory / "echo-ws.toml").write_text(
        'id = "echo-ws"\n[transport]\ntype = "websocket"\nendpoint = "ws://127.0.0.1:1/ws"\n'
        'token_env = "MESH_TEST_UNSET_WS_TOKEN"\n'
    )
    (directory / "caller.toml").write_text(
        'id = "caller"\n[transport]\ntype = "dial-in"\ntoken_env = "CALLER_TOKEN"\n'
    )


async def test_configured_agents_are_listed_counted_and_answered_503_with_the_reason(
    tmp_path: Path,
) -> None:
    manifests(tmp_path)
    env = {"CALLER_TOKEN": DIAL_IN_TOKEN}
    async with (
        spawn_daemon(tmp_path, env=env) as daemon,
        httpx.AsyncClient(base_url=daemon.http) as http,
    ):
        listed = {a["id"]: a for a in (await http.get("/agents")).json()["agents"]}
        assert listed["echo-http"]["status"] == "connecting"
        assert "127.0.0.1" in listed["echo-http"]["link_error"]
        assert listed["echo-ws"]["status"] == "offline"
        assert "MESH_TEST_UNSET_WS_TOKEN" in listed["echo-ws"]["link_error"]
        assert listed["caller"]["status"] == "waiting for dial-in"
        assert listed["caller"]["last_seen_ago"] is None
        counts = (await http.get("/health")).json()["agents"]
        assert counts == {
            "online": 0,
            "stale": 0,
            "offline": 1,
            "connecting": 1,
            "waiting for dial-in": 1,
        }
        one = await http.get("/agents/caller")
        assert one.status_code == 200 and one.json()["status"] == "waiting for dial-in"
        for agent, status in (("echo-http", "connecting"), ("echo-ws", "offline")):
            reply = await http.post("/rpc", json={"agent": agent, "method": "ping"})
            assert reply.status_code == 503, reply.text
            error = reply.json()["error"]
            assert f"agent {agent!r} is {status}" in error["message"]
            assert error["data"]["status"] == status and error["data"]["link_error"]
        nobody = await http.post("/rpc", json={"agent": "nobody", "method": "ping"})
        assert nobody.status_code == 404
        assert (await http.get("/agents/nobody")).status_code == 404


async def test_an_agent_whose_info_names_another_id_is_closed_with_4003(tmp_path: Path) -> None:
    manifests(tmp_path)
    async with spawn_daemon(tmp_path, env={"CALLER_TOKEN": DIAL_IN_TOKEN}) as daemon:
        impostor = Agent("someone-else")  # its agent/info says so; the token is caller's
        with anyio.fail_after(20):
            async with open_websocket(daemon.ws, token=DIAL_IN_TOKEN) as link:
                await impostor.serve(link)
                code = link.close_code
    assert code == 4003


async def test_mesh_agents_lists_configured_agents_that_never_connected(tmp_path: Path) -> None:
    manifests(tmp_path)
    async with spawn_daemon(tmp_path, env={"CALLER_TOKEN": DIAL_IN_TOKEN}) as daemon:
        with anyio.fail_after(60):
            done = await anyio.run_process(
                [sys.executable, "-m", "mesh.cli", "agents", "--url", daemon.http], check=False
            )
    rows = done.stdout.decode().splitlines()
    assert done.returncode == 0, done.stderr.decode()
    assert any(r.startswith("caller") and "waiting for dial-in" in r and "never" in r for r in rows)
    assert any(r.startswith("echo-ws") and "offline" in r for r in rows)
