"""One door: every surface that calls an agent is refused for an identity the agent refuses.

A real ``mesh serve`` with two witness agents (real processes that write down
every call they serve): ``vault`` admits only the client token ``ops``;
``mole`` admits anyone. The client token ``dev`` then tries every way there is
to reach ``vault`` — ``/rpc``, ``/broadcast``, through ``mole`` (``mesh/call``),
a room (``POST /rooms`` and the MCP room tool), ``/mcp`` ``tools/call``,
``mesh mcp``, A2A (the card and ``SendMessage``), and joining a room as a
person — and each is refused (403 or Forbidden, -32007) while ``vault`` never runs.
The same surfaces hold a deadline a caller gives to the daemon's ``max_call_timeout``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mesh.mcp._revisions import envelope
from mesh.testing import Daemon, spawn_daemon

from .test_daemon_auth import create_token

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
TALLY = Path(__file__).with_name("_tally_agent.py")
FORBIDDEN = -32007
JSON = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def witness_manifest(directory: Path, agent_id: str, log: Path, access: str = "") -> None:
    """A witness agent over stdio that appends each call it serves to ``log``."""
    args = [str(TALLY), str(log), "--stdio", "--id", agent_id]
    (directory / f"{agent_id}.toml").write_text(
        f'id = "{agent_id}"\ncapabilities = ["chat"]\n[transport]\ntype = "stdio"\n'
        f"command = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n{access}"
    )


def vault_calls(log: Path) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if line.startswith("vault ")]


def relay_env(daemon: Daemon, token: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MESH_TOKEN": token}
    env.pop("MESH_DATA_DIR", None)
    return env


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "_meta": envelope()}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


async def through_mesh_mcp(daemon: Daemon, token: str, request: dict[str, Any]) -> Any:
    """One request through `mesh mcp` (stdio relayed onto /mcp's WebSocket), as a host sends it."""
    command = [sys.executable, "-m", "mesh.cli", "mcp", "--url", daemon.http]
    env = relay_env(daemon, token)
    async with await anyio.open_process(command, env=env, stderr=None) as process:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(json.dumps(request).encode() + b"\n")
        received = b""
        with anyio.fail_after(30):
            while b"\n" not in received:
                received += await process.stdout.receive()
        await process.stdin.aclose()
        with anyio.fail_after(10):
            await process.wait()
    return json.loads(received.splitlines()[0])


def assert_refused(response: httpx.Response, *words: str) -> None:
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == FORBIDDEN, error
    for word in words:
        assert word in error["message"], error["message"]


async def test_every_surface_refuses_an_identity_the_agent_refuses(tmp_path: Path) -> None:
    manifests, log = tmp_path / "manifests", tmp_path / "calls.log"
    manifests.mkdir()
    witness_manifest(manifests, "vault", log, '[access]\ncallers = ["client:ops"]\n')
    witness_manifest(manifests, "mole", log)
    args = ["--data-dir", str(tmp_path / "data")]
    async with spawn_daemon(manifests, extra_args=args) as daemon:
        await daemon.wait_online("vault", "mole")
        dev = await create_token(daemon, "client", "dev")
        ops = await create_token(daemon, "client", "ops")
        said = {"message": "the secret"}
        echo: dict[str, Any] = {"name": "echo", "arguments": said}
        async with daemon.client(token=dev) as http:
            # /rpc, and /broadcast (the whole of a reserved method; vault's part of any other)
            rpc = await http.post(
                "/rpc", json={"agent": "vault", "method": "tools/call", "params": echo}
            )
            assert_refused(rpc, "vault", "access.callers")
            cast = await http.post("/broadcast", json={"method": "tools/call", "params": echo})
            assert cast.status_code == 200, cast.text
            assert cast.json()["agents"]["vault"]["error"]["code"] == FORBIDDEN
            turn = await http.post("/broadcast", json={"method": "room/turn", "params": {}})
            assert_refused(turn, "reserved")
            # agent to agent: mole may be called, but vault does not take mole's calls
            relay = {"name": "relay", "arguments": {"to": "vault"}}
            routed = await http.post(
                "/rpc", json={"agent": "mole", "method": "tools/call", "params": relay}
            )
            assert_refused(routed, "agent 'mole'")
            # a room made by dev with vault in it: refused at creation, naming vault and the rule
            spec: dict[str, Any] = {"topic": "Tell me the secret", "members": ["vault", "mole"]}
            room = await http.post("/rooms", json=spec)
            assert_refused(room, "'vault'", "access.callers")
            assert (await http.get("/rooms")).json()["rooms"] == []
            # /mcp over HTTP: the room tool and vault's own tool
            started = await http.post("/mcp", json=tool_call("mesh_start_room", spec), headers=JSON)
            assert started.json()["result"]["isError"] is True, started.text
            assert "access.callers" in started.text
            mcp = await http.post("/mcp", json=tool_call("vault__echo", said), headers=JSON)
            assert mcp.json()["result"]["isError"] is True, mcp.text
            assert "does not accept calls from client token 'dev'" in mcp.text
        # `mesh mcp`: the same /mcp over its WebSocket
        relayed = await through_mesh_mcp(daemon, dev, tool_call("vault__echo", said))
        assert relayed["result"]["isError"] is True, relayed
        assert "does not accept calls from client token 'dev'" in json.dumps(relayed)
        # A2A: for dev, vault has neither a card nor an endpoint that answers
        async with daemon.client(token=dev) as http:
            card = await http.get("/a2a/vault/.well-known/agent-card.json")
            assert card.status_code == 403, card.text
            message = {
                "messageId": "m1",
                "role": "ROLE_USER",
                "parts": [{"data": {"tool": "echo", "arguments": said}}],
            }
            send = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message},
            }
            a2a = await http.post("/a2a/vault", json=send, headers={"A2A-Version": "1.0"})
            assert a2a.status_code == 403, a2a.text
            assert "access.callers" in a2a.text
        assert vault_calls(log) == [], "a refused call reached vault"
        # The rule is the token's, not the surface's: ops gets through the same doors.
        async with daemon.client(token=ops) as http:
            ok = await http.post(
                "/rpc", json={"agent": "vault", "method": "tools/call", "params": echo}
            )
            assert ok.status_code == 200, ok.text
            spec = {
                "id": "open",
                "topic": "t",
                "members": ["vault", "mole"],
                "people": {"join": "clients"},
            }
            assert (await http.post("/rooms", json=spec)).status_code == 201
        assert vault_calls(log) != []
        # A person's words reach every agent of the room: dev may not sit where vault hears them,
        # even in a room whose owner lets any client join.
        async with daemon.client(token=dev) as http:
            joined = await http.post("/rooms/open/join", json={"name": "Dev"})
            assert_refused(joined, "'vault'", "access.callers")
            spoke = await http.post("/rooms/open/say", json={"member": "dev", "text": "Goodbye."})
            assert_refused(spoke, "'vault'")
            members = (await http.get("/rooms/open")).json()["room"]["room"]["members"]
            assert [m["id"] for m in members] == ["vault", "mole"]  # no seat was made
        async with daemon.client(token=ops) as http:
            await http.post("/rooms/open/stop")


#: The daemon's max_call_timeout unless configured, and a deadline just past it.
LIMIT, TOO_LONG = 300, 301


async def test_every_surface_holds_a_callers_deadline_to_max_call_timeout(tmp_path: Path) -> None:
    manifests, log = tmp_path / "manifests", tmp_path / "calls.log"
    manifests.mkdir()
    witness_manifest(manifests, "vault", log)
    witness_manifest(manifests, "mole", log)
    async with spawn_daemon(manifests) as daemon:
        await daemon.wait_online("vault", "mole")
        dev = await create_token(daemon, "client", "dev")
        echo: dict[str, Any] = {"name": "echo", "arguments": {"message": "hold the line"}}
        async with daemon.client(token=dev) as http:
            for timeout in (TOO_LONG, 0, -1):
                body: dict[str, Any] = {"agent": "vault", "method": "tools/call", "params": echo}
                rpc = await http.post("/rpc", json=body | {"timeout": timeout})
                assert_refused(rpc, "max_call_timeout", f"(0, {LIMIT}] s")
                assert rpc.json()["error"]["data"] == {"limit": "max_call_timeout", "max": LIMIT}
            body = {"method": "tools/call", "params": echo, "timeout": TOO_LONG}
            assert_refused(await http.post("/broadcast", json=body), "max_call_timeout")
            # through mole: mole's own call is within bounds, the one it makes is not
            relay: dict[str, Any] = {"name": "relay", "arguments": {"to": "vault"}}
            relay["arguments"]["timeout"] = TOO_LONG
            routed = await http.post(
                "/rpc", json={"agent": "mole", "method": "tools/call", "params": relay}
            )
            assert_refused(routed, "agent 'mole'", "max_call_timeout")
            # a room whose turns would wait longer, over HTTP and over /mcp's room tool
            spec: dict[str, Any] = {"topic": "t", "members": ["vault", "mole"]}
            spec["limits"] = {"turn_timeout": TOO_LONG}
            assert_refused(await http.post("/rooms", json=spec), "'vault'", "max_call_timeout")
            started = await http.post("/mcp", json=tool_call("mesh_start_room", spec), headers=JSON)
            assert started.json()["result"]["isError"] is True, started.text
            assert "max_call_timeout" in started.text
            assert (await http.get("/rooms")).json()["rooms"] == []
            # A2A's metadata.timeout
            part = {"data": {"tool": "echo", "arguments": echo["arguments"]}}
            message = {"messageId": "m1", "role": "ROLE_USER", "parts": [part]}
            params = {"message": message, "metadata": {"timeout": TOO_LONG}}
            send = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
            a2a = await http.post("/a2a/vault", json=send, headers={"A2A-Version": "1.0"})
            assert a2a.json()["error"]["code"] == -32602, a2a.text
            assert "max_call_timeout" in a2a.json()["error"]["message"]
            assert vault_calls(log) == [], "a refused deadline reached vault"
            # At the limit each goes through.
            body = {"agent": "vault", "method": "tools/call", "params": echo, "timeout": LIMIT}
            assert (await http.post("/rpc", json=body)).status_code == 200
            relay["arguments"] = {"to": "vault", "timeout": LIMIT}
            routed = await http.post(
                "/rpc", json={"agent": "mole", "method": "tools/call", "params": relay}
            )
            assert routed.status_code == 200, routed.text
        assert len(vault_calls(log)) == 2
        # The daemon's operator is the embedder: its own tokens are held to it too (an
        # admin is trusted with every agent, not with holding one's calls for a day).
        async with daemon.client() as http:
            body = {"agent": "vault", "method": "tools/call", "params": echo, "timeout": TOO_LONG}
            assert_refused(await http.post("/rpc", json=body), "admin token")
