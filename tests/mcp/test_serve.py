"""The mesh's agents served to real MCP clients: the mcp SDK's ``Client`` (auto and legacy)
and the npm inspector's CLI, through ``mesh mcp`` (stdio) and the daemon's ``/mcp``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from mesh.cli._codes import EXIT_DENIED
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.mcp._peers import ROOT, WITHOUT_COVERAGE, inspector_command
from tests.mcp.test_limits import filesystem_manifest

pytestmark = pytest.mark.anyio

ECHO = """id = "echo"
capabilities = ["echo"]
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio"]
"""


@asynccontextmanager
async def daemon_with_echo(tmp_path: Path) -> AsyncIterator[Daemon]:
    manifests = tmp_path / "manifests"
    manifests.mkdir(exist_ok=True)
    (manifests / "echo.toml").write_text(ECHO)
    data = ["--data-dir", str(tmp_path / "data")]
    async with spawn_daemon(manifests, extra_args=data) as daemon:
        await daemon.wait_online("echo")
        yield daemon


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """The echo daemon for the tests that call through it and name their own tokens: the
    daemon and its agent, started once per backend."""
    async with daemon_with_echo(tmp_path_factory.mktemp("mcp-serve")) as shared:
        yield shared


def mesh_mcp(daemon: Daemon) -> StdioServerParameters:
    """What an MCP host's config says: run `mesh mcp` against the daemon, with a token."""
    assert daemon.token is not None
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "mesh.cli", "mcp", "--url", daemon.http],
        env={"PYTHONPATH": str(ROOT), "MESH_TOKEN": daemon.token},
    )


def relay_env(daemon: Daemon, token: str | None = None) -> dict[str, str]:
    """`mesh mcp`'s environment: ours, the repo importable, and the token (admin's by default)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MESH_TOKEN": token or daemon.token or ""}
    env.pop("MESH_DATA_DIR", None)
    return env


@asynccontextmanager
async def over_http(daemon: Daemon) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport to ``/mcp``, presenting the admin token."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {daemon.token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(f"{daemon.http}/mcp", http_client=http) as streams,
    ):
        yield streams


async def check_client(client: Client) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert {"echo__echo", "echo__fail", "mesh_start_room", "mesh_room_transcript"} <= set(tools)
    assert "[agent echo]" in (tools["echo__echo"].description or "")
    answer = await client.call_tool("echo__echo", {"message": "hi"})
    assert not answer.is_error and answer.structured_content == {"message": "hi"}
    failed = await client.call_tool("echo__fail", {"message": "on purpose"})
    assert failed.is_error and "on purpose" in failed.content[0].text  # type: ignore[union-attr]
    rooms = await client.call_tool("mesh_list_rooms", {})
    assert rooms.structured_content == {"rooms": [], "next": None}
    bad = await client.call_tool("mesh_list_rooms", {"limit": 0})  # the route's own check
    assert bad.is_error and "limit" in bad.content[0].text  # type: ignore[union-attr]
    missing = await client.call_tool("mesh_room_transcript", {"room_id": "nowhere"})
    assert missing.is_error and "nowhere" in missing.content[0].text  # type: ignore[union-attr]
    with pytest.raises(Exception, match="unknown tool"):
        await client.call_tool("echo__nope", {})


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_sdk_client_through_mesh_mcp(daemon: Daemon, mode: Any) -> None:
    changes: list[Any] = []

    async def on_message(message: Any) -> None:
        changes.append(message)

    async with Client(mesh_mcp(daemon), mode=mode, message_handler=on_message) as client:
        await check_client(client)
        if mode == "legacy":  # a handshake-era client hears of agents coming and going
            async with daemon.client() as http:
                await http.post("/agents/register", json={"id": "newcomer"})
            with anyio.fail_after(10):
                while not changes:
                    await client.list_tools()  # a round trip lets the notification in
            assert "list_changed" in repr(changes[0]), changes
            async with daemon.client() as http:  # the daemon is shared: as it was
                assert (await http.delete("/agents/newcomer")).status_code == 204


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_sdk_client_over_http(daemon: Daemon, mode: Any) -> None:
    async with Client(over_http(daemon), mode=mode) as client:
        await check_client(client)


async def run_inspector(*args: str) -> Any:
    command = [*inspector_command(), *args]
    result = await anyio.run_process(command, check=False, env={**os.environ, "NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return json.loads(result.stdout)


async def test_the_inspector_cli_through_mesh_mcp(daemon: Daemon) -> None:
    # (The inspector 0.15 CLI sends no headers, so it cannot present a token to /mcp;
    # over HTTP the SDK's Client is the real client.)
    target = [sys.executable, "-m", "mesh.cli", "mcp", "--url", daemon.http]
    how = ["-e", f"PYTHONPATH={ROOT}", "-e", f"MESH_TOKEN={daemon.token}", *target]
    listed = await run_inspector(*how, "--method", "tools/list")
    assert "echo__echo" in {tool["name"] for tool in listed["tools"]}
    yo = ["--tool-name", "echo__echo", "--tool-arg", "message=yo"]
    called = await run_inspector(*how, "--method", "tools/call", *yo)
    assert called["structuredContent"] == {"message": "yo"}


async def mcp_lines(daemon: Daemon, lines: list[bytes]) -> list[dict[str, Any]]:
    """Write raw lines to `mesh mcp` and read one answer per line, as a host would."""
    command = [sys.executable, "-m", "mesh.cli", "mcp", "--url", daemon.http]
    async with await anyio.open_process(command, env=relay_env(daemon), stderr=None) as process:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(b"".join(line + b"\n" for line in lines))
        received = b""
        with anyio.fail_after(30):
            while received.count(b"\n") < len(lines):
                received += await process.stdout.receive()
        await process.stdin.aclose()
        with anyio.fail_after(10):
            assert await process.wait() == 0
    return [json.loads(line) for line in received.splitlines()]


async def test_malformed_messages_get_jsonrpc_errors_and_the_link_lives(daemon: Daemon) -> None:
    lines = [
        b"{not json",
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        b'{"jsonrpc":"2.0","id":2}',
        b'{"jsonrpc":"2.0","id":0,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":"0","method":"tools/call","params":{"name":"echo__echo",'
        b'"arguments":{"message":"still here"}}}',
    ]
    answers = await mcp_lines(daemon, lines)
    errors = [(a["id"], a["error"]["code"]) for a in answers if "error" in a]
    assert errors == [(None, -32700), (None, -32600), (2, -32600)]
    by_id = {a["id"]: a for a in answers if "result" in a}
    assert by_id[0]["result"] == {}
    assert by_id["0"]["result"]["structuredContent"] == {"message": "still here"}
    async with daemon.client() as http:
        bad = await http.post("/mcp", content=b"{nope", headers=JSON)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == -32700
        unsessioned = await http.post("/mcp", json=PING, headers=JSON)
        assert unsessioned.status_code == 400 and "Mcp-Session-Id" in unsessioned.text
        assert (await http.get("/mcp")).status_code == 405
        form = await http.post("/mcp", content=b"x", headers={"content-type": "text/plain"})
        assert form.status_code == 415


JSON = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


def test_mesh_mcp_without_a_daemon_says_so() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mesh.cli", "mcp", "--url", "http://127.0.0.1:9"],
        input=b"",
        capture_output=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == 3
    assert b"cannot reach the daemon" in result.stderr and result.stdout == b""


async def test_mesh_mcp_says_so_when_the_daemon_goes_away(tmp_path: Path) -> None:
    async with daemon_with_echo(tmp_path) as daemon:
        command = [sys.executable, "-m", "mesh.cli", "mcp", "--url", daemon.http]
        async with await anyio.open_process(command, env=relay_env(daemon)) as relay:
            assert relay.stdin is not None and relay.stdout is not None
            await relay.stdin.send(b'{"jsonrpc":"2.0","id":0,"method":"ping"}\n')
            with anyio.fail_after(30):
                assert json.loads(await relay.stdout.receive()) == {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "result": {},
                }
                daemon.process.terminate()
                assert await relay.wait() == 3
            assert relay.stderr is not None
            said = (await relay.stderr.receive()).decode()
            assert "closed the link" in said, said


async def test_mcp_is_behind_the_daemons_tokens(daemon: Daemon) -> None:
    async with httpx.AsyncClient(base_url=daemon.http) as anonymous:
        refused = await anonymous.post("/mcp", json=PING, headers=JSON)
        assert refused.status_code == 401
        error = refused.json()  # what an MCP client can show: a JSON-RPC error's words
        assert (error["id"], error["error"]["code"]) == (1, -32005), error
        assert "missing token" in error["error"]["message"], error
        wrong = {**JSON, "Authorization": "Bearer not-a-token"}
        refused = await anonymous.post("/mcp", json=PING, headers=wrong)
        assert "not valid" in refused.json()["error"]["message"], refused.text
    async with daemon.client() as admin:
        made = await admin.post("/tokens", json={"role": "observer", "name": "watcher"})
        observer = made.json()["token"]
    async with httpx.AsyncClient(base_url=daemon.http) as http:
        headers = {**JSON, "Authorization": f"Bearer {observer}"}
        forbidden = await http.post("/mcp", json=PING, headers=headers)
        assert forbidden.status_code == 403  # reading is not calling
        assert forbidden.json()["error"]["code"] == -32007, forbidden.text
    command = [sys.executable, "-m", "mesh.cli", "mcp", "--url", daemon.http]
    for token in ("not-a-token", observer):  # stdin stays open, as a host keeps it
        async with await anyio.open_process(command, env=relay_env(daemon, token)) as relay:
            with anyio.fail_after(30):
                assert await relay.wait() == EXIT_DENIED
            assert relay.stderr is not None
            said = await relay.stderr.receive()
            assert b"refused the token" in said, said
            if token == observer:  # in words, not an enum's repr
                assert b"an observer token lacks the 'call' right (held by" in said, said


@pytest.fixture(scope="module")
async def roomy(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Daemon, Path]]:
    """A daemon of echo and the filesystem server (mounted with 4 MiB frames) serving a
    1.5 MB file, once per backend for both routes' tests: the daemon and the file."""
    tmp = tmp_path_factory.mktemp("mcp-serve-roomy")
    served, manifests = tmp / "served", tmp / "manifests"
    served.mkdir()
    manifests.mkdir()
    big = served / "big.txt"
    big.write_text("0123456789abcdef\n" * 90_000)  # 1.5 MB
    filesystem_manifest(manifests, served, "fs", 4 << 20)
    async with daemon_with_echo(tmp) as daemon:
        await daemon.wait_online("fs", timeout=60)
        yield daemon, big


@pytest.mark.parametrize("route", ["mesh mcp", "/mcp"])
async def test_results_up_to_the_agents_limit_reach_mcp_clients(
    roomy: tuple[Daemon, Path], route: str
) -> None:
    # Sent as text and as structuredContent (see docs/mcp.md): twice the agent's result.
    # echo: just under its 1 MiB limit; the filesystem server, mounted with 4 MiB: past 1 MiB.
    daemon, big = roomy
    wire = mesh_mcp(daemon) if route == "mesh mcp" else over_http(daemon)
    async with Client(wire) as client:
        answer = await client.call_tool("echo__blob", {"size": 1_000_000})
        assert not answer.is_error, str(answer.content)[:300]
        assert answer.structured_content == {"data": "x" * 1_000_000}
        assert json.loads(answer.content[0].text) == answer.structured_content  # type: ignore[union-attr]
        read = await client.call_tool("fs__read_text_file", {"path": str(big)})
        assert not read.is_error, str(read.content)[:300]
        assert read.structured_content == {"content": big.read_text()}


#: fastmcp's Client runs on asyncio only, so it runs in a process of its own (without
#: coverage: it runs none of the mesh's code): it calls the echo agent's `sleep`, reporting
#: progress, over HTTP in its default mode, and prints each progress it hears, then the result.
FASTMCP_PROGRESS = """
import asyncio, sys
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

async def main(url, token):
    transport = StreamableHttpTransport(url, headers={"Authorization": "Bearer " + token})

    async def heard(progress, total, message):
        print("progress", progress, total, flush=True)

    async with Client(transport, progress_handler=heard) as client:
        arguments = {"seconds": 0.3, "progress_every": 0.1}
        result = await client.call_tool("echo__sleep", arguments)
        print("result", result.structured_content, flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_progress_reaches_a_fastmcp_client_over_http(daemon: Daemon) -> None:
    assert daemon.token is not None
    command = [sys.executable, "-c", FASTMCP_PROGRESS, f"{daemon.http}/mcp", daemon.token]
    with anyio.fail_after(60):
        env = {**os.environ, **WITHOUT_COVERAGE}
        done = await anyio.run_process(command, check=False, env=env)
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 0, (lines, done.stderr.decode()[-2000:])
    heard = [line.split() for line in lines if line.startswith("progress ")]
    assert len(heard) >= 2, lines  # each 0.1 s of 0.3, before the result
    assert all(float(total) == 0.3 for _, _, total in heard), heard
    assert lines[-1].startswith("result"), lines
