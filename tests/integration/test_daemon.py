"""The real ``mesh serve`` process with real agent processes on every transport."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mesh.testing import Daemon, EchoServer, echo_agent_command, spawn_daemon, spawn_echo_server
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.faults._helpers import spawn_holding_server, wait_holding
from transports import (
    CloseCode,
    HttpRequest,
    HttpResponse,
    HttpServer,
    WebSocketStream,
    open_http_server,
    websocket_upgrade_handler,
)

pytestmark = pytest.mark.anyio

WS_TOKEN = "ws-token-for-tests"
DIAL_IN_TOKEN = "dial-in-token-for-tests"


def stdio_manifest(agent_id: str, *, interval: float = 10.0) -> str:
    return f"""
id = "{agent_id}"
capabilities = ["echo"]
heartbeat_interval = {interval}
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio", "--id", "{agent_id}"]
"""


def closed_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def write(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(text)


async def rpc(
    daemon: Daemon, agent: str, method: str, params: Any = None, timeout: float = 10
) -> httpx.Response:
    async with daemon.client(timeout=timeout + 5) as http:
        return await http.post(
            "/rpc", json={"agent": agent, "method": method, "params": params, "timeout": timeout}
        )


@asynccontextmanager
async def full_mesh(tmp_path: Path) -> AsyncIterator[tuple[Daemon, dict[str, Any]]]:
    """A daemon with echo over stdio, HTTP, WebSocket, one dialling in, one registered over HTTP."""
    async with AsyncExitStack() as stack:
        over_http: EchoServer = await stack.enter_async_context(spawn_echo_server())
        over_ws: EchoServer = await stack.enter_async_context(spawn_echo_server(token=WS_TOKEN))
        registered: EchoServer = await stack.enter_async_context(spawn_echo_server())
        write(tmp_path, "echo-stdio.toml", stdio_manifest("echo-stdio"))
        write(
            tmp_path,
            "echo-http.toml",
            f'id = "echo-http"\n[transport]\ntype = "http"\nendpoint = "{over_http.http}"\n',
        )
        write(
            tmp_path,
            "echo-ws.toml",
            f'id = "echo-ws"\n[transport]\ntype = "websocket"\nendpoint = "{over_ws.ws}"\n'
            'token_env = "ECHO_WS_TOKEN"\n',
        )
        write(
            tmp_path,
            "echo-dial-in.toml",
            'id = "echo-dial-in"\n[transport]\ntype = "dial-in"\ntoken_env = "DIAL_IN_TOKEN"\n',
        )
        env = {"ECHO_WS_TOKEN": WS_TOKEN, "DIAL_IN_TOKEN": DIAL_IN_TOKEN}
        daemon = await stack.enter_async_context(spawn_daemon(tmp_path, env=env))
        command, _ = echo_agent_command()
        dialler = await anyio.open_process(
            [
                command,
                "-m",
                "mesh.agents.echo",
                "--connect",
                daemon.ws,
                "--token-env",
                "DIAL_IN_TOKEN",
                "--id",
                "echo-dial-in",
            ],
            env={**os.environ, "DIAL_IN_TOKEN": DIAL_IN_TOKEN},
            stdout=None,
            stderr=None,
        )
        stack.push_async_callback(_terminate, dialler)
        async with daemon.client() as http:
            joined = await http.post(
                "/agents/register",
                json={
                    "id": "echo-registered",
                    "endpoint": registered.http,
                    "capabilities": ["echo", "registered"],
                },
            )
            assert joined.status_code == 201, joined.text
        agents = await daemon.wait_online(
            "echo-stdio", "echo-http", "echo-ws", "echo-dial-in", "echo-registered"
        )
        yield daemon, agents


@pytest.fixture(scope="module")
async def shared_mesh(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Daemon, dict[str, Any]]]:
    """``full_mesh`` for tests that only call through it: six processes, started once."""
    async with full_mesh(tmp_path_factory.mktemp("full-mesh")) as mesh:
        yield mesh


async def _terminate(process: anyio.abc.Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()
    await process.aclose()


async def test_echo_over_every_transport_through_the_daemon(
    shared_mesh: tuple[Daemon, dict[str, Any]],
) -> None:
    daemon, agents = shared_mesh
    assert {a: agents[a]["transport"] for a in agents} == {
        "echo-stdio": "stdio",
        "echo-http": "http",
        "echo-ws": "websocket",
        "echo-dial-in": "websocket",
        "echo-registered": "http",
    }
    for agent in agents:
        reply = await rpc(
            daemon, agent, "tools/call", {"name": "echo", "arguments": {"message": agent}}
        )
        assert reply.status_code == 200, reply.text
        assert reply.json() == {"result": {"message": agent}}
    # agent -> agent, through the daemon's orchestrator
    relayed = await rpc(
        daemon,
        "echo-stdio",
        "tools/call",
        {"name": "relay", "arguments": {"to": "echo-dial-in", "message": "hop"}},
    )
    assert relayed.json() == {"result": {"from": "echo-dial-in", "message": "hop"}}


async def test_the_cli_against_a_running_daemon(
    shared_mesh: tuple[Daemon, dict[str, Any]],
) -> None:
    daemon, _ = shared_mesh
    mesh = [sys.executable, "-m", "mesh.cli"]
    env = daemon.env()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*mesh, *args], capture_output=True, text=True, env=env, timeout=30, check=False
        )

    table = await anyio.to_thread.run_sync(run, "agents")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == [
        "ID",
        "TRANSPORT",
        "STATUS",
        "LAST",
        "SEEN",
        "CAPABILITIES",
    ]
    assert sum(" online " in line for line in table.stdout.splitlines()) == 5
    called = await anyio.to_thread.run_sync(run, "call", "echo-ws", "reverse", "--arg", "text=abc")
    assert called.returncode == 0 and '"cba"' in called.stdout
    failing = await anyio.to_thread.run_sync(
        run, "call", "echo-http", "fail", "--json", '{"message": "nope"}'
    )
    assert failing.returncode == 1 and "nope" in failing.stderr
    unknown = await anyio.to_thread.run_sync(run, "ping", "nobody")
    assert unknown.returncode == 4 and "no agent 'nobody'" in unknown.stderr
    pinged = await anyio.to_thread.run_sync(run, "ping", "echo-stdio")
    assert pinged.returncode == 0 and "pong" in pinged.stdout
    nobody = f"http://127.0.0.1:{closed_port()}"  # the daemon is shared: it is still up
    unreachable = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [*mesh, "agents", "--url", nobody], capture_output=True, text=True, timeout=30
        )
    )
    assert unreachable.returncode == 3 and "cannot reach the daemon" in unreachable.stderr


async def test_http_api_registration_heartbeat_and_bad_requests(tmp_path: Path) -> None:
    write(tmp_path, "echo-stdio.toml", stdio_manifest("echo-stdio"))
    async with spawn_daemon(tmp_path) as daemon, daemon.client() as http:
        bad = await http.post("/agents/register", json={"id": "x", "heartbeat_interval": "soon"})
        assert bad.status_code == 400 and "$.heartbeat_interval" in bad.json()["error"]["message"]
        assert (await http.post("/agents/register", content=b"{not json")).status_code == 400
        assert (await http.post("/rpc", json={"agent": "echo-stdio"})).status_code == 400
        joined = await http.post("/agents/register", json={"id": "pusher", "heartbeat_interval": 5})
        assert joined.status_code == 201 and joined.json()["status"] == "online"
        assert (await http.post("/agents/pusher/heartbeat")).json() == {
            "id": "pusher",
            "status": "online",
        }
        assert (await http.post("/agents/nobody/heartbeat")).status_code == 404
        no_link = await http.post("/rpc", json={"agent": "pusher", "method": "ping"})
        assert (
            no_link.status_code == 503
            and "without an endpoint" in no_link.json()["error"]["message"]
        )
        assert (await http.get("/agents/pusher")).json()["id"] == "pusher"
        assert (await http.delete("/agents/pusher")).status_code == 204
        assert (await http.get("/agents/pusher")).status_code == 404
        assert (await http.get("/nowhere")).status_code == 404
        assert (await http.put("/agents")).status_code == 405
        health = (await http.get("/health")).json()
        assert health["status"] == "ok" and health["agents"]["online"] >= 1


async def test_sigterm_lets_calls_in_flight_finish_and_exits_0(tmp_path: Path) -> None:
    async with spawn_holding_server() as holder:  # says on stdout when each call starts
        write(
            tmp_path,
            "holder.toml",
            f'id = "holder"\n[transport]\ntype = "http"\nendpoint = "{holder.http}"\n',
        )
        async with spawn_daemon(tmp_path) as daemon:
            await daemon.wait_online("holder")
            replies: list[httpx.Response] = []

            async def slow_call() -> None:
                hold = {"name": "hold", "arguments": {"seconds": 1.0}}
                replies.append(await rpc(daemon, "holder", "tools/call", hold))

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(slow_call)
                with anyio.fail_after(10):
                    await wait_holding(holder, 3)  # all three are in flight through the daemon
                daemon.process.send_signal(signal.SIGTERM)
            with anyio.fail_after(15):
                code = await daemon.process.wait()
    assert code == 0
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert all(r.json() == {"result": {"slept": 1.0}} for r in replies)


async def test_a_broken_manifest_is_reported_and_the_good_ones_run(tmp_path: Path) -> None:
    write(tmp_path, "echo-stdio.toml", stdio_manifest("echo-stdio"))
    write(
        tmp_path,
        "broken.toml",
        'id = "broken"\nheartbeat_interval = "often"\n[transport]\ntype = "stdio"\ncommand = "x"\n',
    )
    async with spawn_daemon(tmp_path) as daemon:
        await daemon.wait_online("echo-stdio")
        reply = await rpc(
            daemon, "echo-stdio", "tools/call", {"name": "echo", "arguments": {"message": "fine"}}
        )
        assert reply.json() == {"result": {"message": "fine"}}
    validate = await anyio.run_process(
        [sys.executable, "-m", "mesh.cli", "validate", str(tmp_path)], check=False
    )
    out, err = validate.stdout.decode(), validate.stderr.decode()
    assert validate.returncode == 1
    assert "broken.toml" in err and "$.heartbeat_interval" in err
    assert "1 valid, 1 invalid" in out


async def test_agent_events_stream_a_snapshot_then_every_change(tmp_path: Path) -> None:
    write(tmp_path, "echo-stdio.toml", stdio_manifest("echo-stdio"))
    async with spawn_daemon(tmp_path) as daemon:
        await daemon.wait_online("echo-stdio")
        async with daemon.open_events("/agents/events") as events, daemon.client() as http:
            with anyio.fail_after(10):
                snapshot = json.loads(await events.receive())
                assert snapshot["type"] == "snapshot"
                assert [(a["id"], a["status"]) for a in snapshot["agents"]] == [
                    ("echo-stdio", "online")
                ]
                joined = await http.post("/agents/register", json={"id": "pusher"})
                assert joined.status_code == 201, joined.text
                registered = json.loads(await events.receive())
                assert (await http.delete("/agents/pusher")).status_code == 204
                change = json.loads(await events.receive())
    assert (registered["type"], registered["old"], registered["agent"]["id"]) == (
        "registered",
        None,
        "pusher",
    )
    assert (change["type"], change["old"], change["agent"]["id"]) == (
        "deregistered",
        "online",
        "pusher",
    )


@asynccontextmanager
async def refusing_later(gate: anyio.Event) -> AsyncIterator[HttpServer]:
    """A WebSocket endpoint that drops its first caller (try again), then, once ``gate``
    is set, refuses every caller with 4001 (do not come back)."""
    dialled = 0

    async def refuse(stream: WebSocketStream, _: str | None) -> None:
        nonlocal dialled
        dialled += 1
        if dialled > 1:
            await gate.wait()
            await stream.aclose(CloseCode.UNAUTHORIZED, "Unauthorized")
        else:
            await stream.aclose(CloseCode.INTERNAL_ERROR, "not yet")

    async def nothing(request: HttpRequest) -> HttpResponse:
        return HttpResponse.error(404, "nothing here")

    upgrade = websocket_upgrade_handler(refuse, authenticator=None)
    async with open_http_server(nothing, upgrade_handler=upgrade) as server:
        yield server


async def test_agent_events_tell_a_watcher_when_a_link_gives_up(tmp_path: Path) -> None:
    """An agent that never connected changes nothing in the registry when its link gives
    up: the watcher hears it from the link (``link``), not never (it stayed ``connecting``)."""
    gate = anyio.Event()
    async with refusing_later(gate) as server:
        write(
            tmp_path,
            "refused.toml",
            f'id = "refused"\n[transport]\ntype = "websocket"\nendpoint = "{server.ws_url}/ws"\n'
            'token_env = "REFUSED_TOKEN"\n',
        )
        env = {"REFUSED_TOKEN": "a-token-it-will-not-take"}
        async with (
            spawn_daemon(tmp_path, env=env) as daemon,
            daemon.open_events("/agents/events") as events,
        ):
            with anyio.fail_after(20):
                snapshot = json.loads(await events.receive())
                [before] = snapshot["agents"]
                gate.set()
                event = json.loads(await events.receive())
    assert (before["id"], before["status"]) == ("refused", "connecting")
    assert "1011" in before["link_error"]
    assert (event["type"], event["old"]) == ("link", "connecting")
    assert (event["agent"]["id"], event["agent"]["status"]) == ("refused", "offline")
    assert "4001" in event["agent"]["link_error"]
