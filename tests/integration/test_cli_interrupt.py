"""Ctrl-C is one line, the same every time, and exit 130: a real SIGINT to each long command.

Each command is interrupted while it is working (the daemon listening, a call in flight,
a room being followed), and its whole stderr must be the one line: no traceback, no log.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import pytest

from mesh.cli._codes import EXIT_INTERRUPTED
from mesh.testing import Daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.integration._daemon import slow_personas
from tests.integration.test_cli_truth import mesh, read_all, read_until
from tests.integration.test_daemon_people import _create
from transports import HttpRequest, HttpResponse, open_http_server

pytestmark = pytest.mark.anyio

MESH = [sys.executable, "-m", "mesh.cli"]


@pytest.fixture(scope="module")
async def rooms_daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """A daemon with two personas whose turns take a minute, so a room stays running while
    a command follows it. The room tests interrupt the CLI, never the daemon or its rooms,
    and each makes a room of its own id: starting the daemon and its two persona processes
    is most of what each of them would cost."""
    async with slow_personas(tmp_path_factory, "interrupt") as daemon:
        yield daemon


async def interrupt(process: anyio.abc.Process) -> tuple[int, list[str]]:
    """SIGINT, then the exit status and stderr's lines."""
    async with process:
        try:
            with anyio.fail_after(60):
                process.send_signal(signal.SIGINT)
                code = await process.wait()
                err = (await read_all(process.stderr)).decode()
        except TimeoutError:
            # Closing the process waits for it, shielded: one that ignored the signal would
            # hold the test past every timeout instead of failing it.
            process.kill()
            raise
    return code, err.strip().splitlines()


async def test_mesh_serve(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    serve = [*MESH, "serve", "--port", "0", "--manifests", str(tmp_path / "m")]
    serve += ["--data-dir", str(tmp_path / "d"), "--log-level", "warning"]
    process = await anyio.open_process(serve)
    with anyio.fail_after(60):
        assert b'"listening"' in await read_until(process, b"\n")
    assert await interrupt(process) == (EXIT_INTERRUPTED, ["mesh: interrupted"])


async def test_mesh_serve_stops_on_a_signal_sent_the_moment_it_listens(
    tmp_path: Path, anyio_backend: str
) -> None:
    """Started as a shell's background job is (SIGINT ignored, inherited), and signalled as
    a supervisor does the moment it reads "listening": the daemon caught the signal only
    after it said so, and a SIGINT in between was lost (it ran on). The daemon runs on the
    test's own backend: the test only drives a process, so each daemon backend is one run."""
    (tmp_path / "m").mkdir()
    serve = [*MESH, "serve", "--port", "0", "--manifests", str(tmp_path / "m"), "--backend"]
    serve += [anyio_backend, "--data-dir", str(tmp_path / "d"), "--log-level", "warning"]
    ignoring = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *serve]
    process = await anyio.open_process(ignoring)
    with anyio.fail_after(60):
        assert b'"listening"' in await read_until(process, b"\n")
    assert await interrupt(process) == (EXIT_INTERRUPTED, ["mesh: interrupted"])


async def test_mesh_call_with_the_call_in_flight() -> None:
    arrived = anyio.Event()

    async def handle(request: HttpRequest) -> HttpResponse:
        arrived.set()
        await anyio.sleep_forever()  # the agent is slow: the call is in flight
        raise AssertionError  # pragma: no cover

    async with open_http_server(handle) as server:
        process = await mesh("call", "echo", "sleep", "--arg", "seconds=60", url=server.url)
        with anyio.fail_after(60):
            await arrived.wait()
        assert await interrupt(process) == (EXIT_INTERRUPTED, ["mesh: interrupted"])


SLOW_AGENT = """
import sys
import anyio
from mesh import Agent

agent = Agent("slow")


@agent.tool
async def wait() -> None:
    print("in flight", file=sys.stderr, flush=True)
    await anyio.sleep(60)
"""


async def test_mesh_dev_with_the_call_in_flight(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SLOW_AGENT)
    process = await anyio.open_process([*MESH, "dev", str(tmp_path / "slow.py"), "--call", "wait"])
    with anyio.fail_after(60):
        await read_stderr_until(process, b"in flight\n")
    assert await interrupt(process) == (EXIT_INTERRUPTED, ["mesh: interrupted"])


async def read_stderr_until(process: anyio.abc.Process, marker: bytes) -> None:
    assert process.stderr is not None
    seen = b""
    while marker not in seen:  # bounded by the caller's deadline
        seen += await process.stderr.receive()


@pytest.mark.timeout(180)  # a daemon, two personas and the CLI on a loaded machine
async def test_mesh_room_watch(rooms_daemon: Daemon) -> None:
    async with rooms_daemon.client() as http:
        body = {"id": "tea", "topic": "Tea?", "members": ["alice", "bob"]}
        assert (await http.post("/rooms", json=body)).status_code == 201
    process = await mesh("room", "watch", "tea", daemon=rooms_daemon)
    with anyio.fail_after(60):
        await read_until(process, b"Bob")  # following: the room is running
    assert await interrupt(process) == (
        EXIT_INTERRUPTED,
        ["mesh: interrupted; room tea runs on"],
    )


@pytest.mark.timeout(180)  # a daemon, two personas and the CLI on a loaded machine
async def test_mesh_room_join(rooms_daemon: Daemon) -> None:
    await _create(rooms_daemon, "desk", 40)
    process = await mesh("room", "join", "desk", "--as", "Dave", daemon=rooms_daemon)
    with anyio.fail_after(60):
        await read_until(process, b"Dave")  # the room's events, Dave's joining among them
    # Its stdin stays open, as a terminal's does: the reader thread must not hold the exit.
    code, lines = await interrupt(process)
    assert code == EXIT_INTERRUPTED
    assert lines[1:] == ["mesh: interrupted; left room desk"], lines  # after "joined room …"
