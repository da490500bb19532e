"""The ``mesh`` command tells the truth: exit codes, one-line errors, the daemon's own timings."""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import anyio.abc
import pytest

from mesh.cli._codes import (
    EXIT_BROKEN_PIPE,
    EXIT_CANNOT_LISTEN,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
)
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.integration._daemon import persona_manifest, slow_personas
from transports import HttpRequest, HttpResponse, open_http_server

pytestmark = pytest.mark.anyio

MESH = [sys.executable, "-m", "mesh.cli"]

ECHO = """
id = "{id}"
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio", "--id", "{id}"]
"""


@pytest.fixture(scope="module")
async def echo_daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """Echo agents, and two personas whose model is a closed port: the tests that read it
    or run rooms of their own that stop with an error share it."""
    manifests = tmp_path_factory.mktemp("cli-truth")
    (manifests / "echo.toml").write_text(ECHO.format(id="echo"))
    echo_members(manifests)  # echo agents take no turns: refused when the room is made
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for agent_id in ("gamma", "delta"):
        path = manifests / f"{agent_id}.toml"
        path.write_text(UNREACHABLE_MODEL.format(id=agent_id, path=path, port=port))
    data = ["--data-dir", str(tmp_path_factory.mktemp("cli-truth-data"))]
    async with spawn_daemon(manifests, extra_args=data) as daemon:
        await daemon.wait_online("echo", "alpha", "beta", "gamma", "delta")
        yield daemon


@pytest.fixture(scope="module")
async def slow_rooms_daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """Two personas whose turns take a minute, so a room runs while Ctrl-C reaches the
    command following it; each test makes a room of its own id."""
    async with slow_personas(tmp_path_factory, "cli-truth-slow") as daemon:
        yield daemon


def _env(url: str | None, daemon: Daemon | None) -> dict[str, str]:
    """The CLI's environment: the daemon's URL and token (never a stale .mesh/ of the cwd)."""
    env = daemon.env() if daemon is not None else dict(os.environ)
    return {**env, **({"MESH_URL": url} if url else {})}


async def mesh(
    *args: str, url: str | None = None, daemon: Daemon | None = None
) -> anyio.abc.Process:
    return await anyio.open_process([*MESH, *args], env=_env(url, daemon))


async def run(
    *args: str, url: str | None = None, daemon: Daemon | None = None
) -> tuple[int, str, str]:
    with anyio.fail_after(60):
        done = await anyio.run_process([*MESH, *args], env=_env(url, daemon), check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_a_busy_port_is_one_line_and_exit_6_before_any_agent_starts(tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    (tmp_path / "would-start.toml").write_text(
        'id = "would-start"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
        f'args = ["-c", "open({str(marker)!r}, \'w\')"]\n'
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # Its data dir in tmp_path (tests write nowhere else); info lines (the admin token
        # it writes first) are not errors, so only warnings and errors are shown.
        serve = ["serve", "--port", str(port), "--manifests", str(tmp_path), "--log-level"]
        serve += ["warning", "--data-dir", str(tmp_path / "data")]
        code, _, err = await run(*serve)
    assert code == EXIT_CANNOT_LISTEN, err
    assert err.strip().splitlines() == [
        f"mesh: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert not marker.exists(), "no agent may be started before the port is bound"


@asynccontextmanager
async def fake_daemon(timing: str) -> AsyncIterator[str]:
    """An HTTP server answering every /rpc with ``Server-Timing: timing``."""

    async def handle(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, b'{"result":{}}', headers=(("server-timing", timing),))

    async with open_http_server(handle) as server:
        yield server.url


async def test_ping_reports_the_round_trip_the_daemon_measured(echo_daemon: Daemon) -> None:
    async with fake_daemon("call;dur=1.234") as url:
        code, out, err = await run("ping", "echo", url=url)
    assert code == 0, err
    assert out.strip() == "echo: pong in 1.2 ms (daemon to agent and back)"
    async with echo_daemon.client() as http:
        reply = await http.post("/rpc", json={"agent": "echo", "method": "ping"})
    assert reply.headers["server-timing"].startswith("call;dur=")
    assert reply.json().keys() == {"result"}


async def test_a_room_id_is_escaped_not_resolved_as_a_path(echo_daemon: Daemon) -> None:
    code, out, err = await run("room", "show", "../health", daemon=echo_daemon)
    assert code == EXIT_UNAVAILABLE, out + err
    assert err.strip() == "mesh: no room '../health'"


async def test_a_closed_stdout_ends_quietly_with_141(tmp_path: Path) -> None:
    (tmp_path / "echo.toml").write_text(ECHO.format(id="echo"))
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte: `| head -c 0`
    try:
        with anyio.fail_after(60):
            done = await anyio.run_process(
                [*MESH, "validate", str(tmp_path)], stdout=write_end, check=False
            )
    finally:
        os.close(write_end)
    assert done.returncode == EXIT_BROKEN_PIPE
    assert done.stderr == b""


async def read_all(stream: anyio.abc.ByteReceiveStream | None) -> bytes:
    assert stream is not None
    data = b""
    with suppress(anyio.EndOfStream):
        while True:  # until the process closed it; the caller bounds the wait
            data += await stream.receive()
    return data


def echo_members(directory: Path) -> None:
    for agent_id in ("alpha", "beta"):
        (directory / f"{agent_id}.toml").write_text(ECHO.format(id=agent_id))


#: A persona whose model is a closed port on this machine: every turn fails, none for ever.
UNREACHABLE_MODEL = """
id = "{id}"
capabilities = ["chat"]
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.persona", "--manifest", "{path}", "--stdio"]
[persona]
system_prompt = "You are {id}."
[persona.provider]
provider = "openai"
model = "none"
base_url = "http://127.0.0.1:{port}/v1"
api_key_env = ""
max_retries = 0
timeout = 5
"""


async def test_room_run_exits_1_when_the_room_stops_with_error(echo_daemon: Daemon) -> None:
    members = ["--agent", "alpha", "--agent", "beta"]
    code, _, err = await run("room", "run", "--topic", "x", *members, daemon=echo_daemon)
    assert code == EXIT_FAILED and err.count("\n") == 1, err
    assert "member 'alpha' cannot take turns in a room: it serves no room/turn" in err
    members = ["--agent", "gamma", "--agent", "delta"]
    code, _, err = await run("room", "run", "--topic", "x", *members, daemon=echo_daemon)
    assert code == EXIT_FAILED, err
    assert "stopped: ERROR" in err and "Traceback" not in err


async def read_until(process: anyio.abc.Process, text: bytes) -> bytes:
    assert process.stdout is not None
    seen = b""
    while text not in seen:  # the caller bounds the wait
        seen += await process.stdout.receive()
    return seen


@pytest.mark.parametrize("stop", [False, True])
async def test_ctrl_c_detaches_cleanly_and_says_how_to_stop_the_room(
    slow_rooms_daemon: Daemon, stop: bool
) -> None:
    daemon, room_id = slow_rooms_daemon, "tea-stop" if stop else "tea-detach"
    flags = ["--id", room_id, "--agent", "alice", "--agent", "bob", "--topic", "Tea?"]
    flags += ["--stop-on-interrupt"] if stop else []
    cli = await mesh("room", "run", *flags, daemon=daemon)
    async with cli:
        with anyio.fail_after(30):
            await read_until(cli, b"Bob")  # joined: the room is running
            cli.send_signal(signal.SIGINT)
            code = await cli.wait()
            err = (await read_all(cli.stderr)).decode()
    async with daemon.client() as http:
        room = (await http.get(f"/rooms/{room_id}")).json()["room"]
        await http.post(f"/rooms/{room_id}/stop")  # the shared daemon's personas are free again
    assert code == EXIT_INTERRUPTED
    assert "Traceback" not in err
    if stop:
        assert f"room {room_id} stopped" in err
        assert room["status"] == "stopped" and room["stop_reason"] == "STOPPED"
    else:
        assert f"room {room_id} is still running" in err and f"/rooms/{room_id}/stop" in err
        assert room["status"] == "running"


async def test_room_run_follows_through_a_daemon_restart_printing_every_turn_once(
    tmp_path: Path,
) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir()
    persona_manifest(manifests, "alice", "Alice", ["Tea.", "More tea."], delay=0.2)
    persona_manifest(manifests, "bob", "Bob", ["Coffee.", "More coffee."], delay=0.2)
    data = ["--data-dir", str(tmp_path / "d")]
    async with spawn_daemon(manifests, extra_args=data) as first:
        await first.wait_online("alice", "bob")
        port = first.http.rsplit(":", 1)[1]
        flags = ["--id", "r", "--agent", "alice", "--agent", "bob", "--topic", "Tea?"]
        cli = await mesh("room", "run", *flags, "--max-turns", "10", daemon=first)
        with anyio.fail_after(60):
            printed = await read_until(cli, b"), turn 3")
        first.process.send_signal(signal.SIGKILL)  # the observer stream drops mid-room
        await first.process.wait()
    async with cli, spawn_daemon(manifests, extra_args=[*data, "--port", port]):
        with anyio.fail_after(90):
            printed += await read_all(cli.stdout)
            err = (await read_all(cli.stderr)).decode()
            code = await cli.wait()
    assert code == 0, err
    turns = [int(t) for t in re.findall(rb"\), turn (\d+)", printed)]
    assert turns == list(range(1, 11)), printed.decode()
    assert "stopped: MAX_TURNS" in err
