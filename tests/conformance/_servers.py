"""Echo agents served over HTTP/WebSocket, one process per event loop, shared by many tests.

Starting a Python child is most of what a conformance test over HTTP or WebSocket costs
on a loaded machine (its imports, under coverage). Over those transports a test's state
lives in its connection, not in the process: each test dials its own link (a new session
on the agent's side), so one process per backend can serve them all. The process is
started and stopped synchronously, outside any event loop: it outlives each test's loop,
and anyio's plugin needs no higher-scoped async fixture.

A test that kills, stops or exhausts its agent must not use these: it spawns its own.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass

from mesh.testing import SPAWN_TIMEOUT

ECHO_MODULE = "mesh.agents.echo"


@dataclass(frozen=True, slots=True)
class SharedServer:
    """Where one shared echo agent listens, and the token it wants."""

    http: str
    ws: str
    token: str
    process: subprocess.Popen[bytes]

    def check_alive(self) -> None:
        """Fail the test that broke the shared agent, not the ones after it."""
        code = self.process.poll()
        assert code is None, f"the shared echo agent (pid {self.process.pid}) exited: {code}"


def _read_line(process: subprocess.Popen[bytes], timeout: float) -> bytes:
    """The first line on the child's stdout, within ``timeout`` (select: no thread)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    line = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise TimeoutError(f"the echo agent said nothing within {timeout} s: {line!r}")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the echo agent exited before it listened: {line!r}")
            line += chunk
    return line


def start_server(backend: str, token: str) -> SharedServer:
    """``python -m mesh.agents.echo --http 127.0.0.1:0`` on ``backend``, once it listens."""
    args = [sys.executable, "-m", ECHO_MODULE, "--http", "127.0.0.1:0", "--backend", backend]
    args += ["--token-env", "ECHO_TOKEN"]
    env = {**os.environ, "ECHO_TOKEN": token}
    process = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        announced = json.loads(_read_line(process, SPAWN_TIMEOUT))
    except BaseException:
        stop_server(process)
        raise
    return SharedServer(announced["http"], announced["ws"], token, process)


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """Terminate (coverage saves what the child measured on SIGTERM), then kill if it hangs."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


class SharedServers:
    """One echo server per backend, started on first use, all stopped by :meth:`close`."""

    def __init__(self, token: str) -> None:
        self._token = token
        self._servers: dict[str, SharedServer] = {}

    def get(self, backend: str) -> SharedServer:
        server = self._servers.get(backend)
        if server is None:
            server = self._servers[backend] = start_server(backend, self._token)
        server.check_alive()
        return server

    def close(self) -> None:
        for server in self._servers.values():
            stop_server(server.process)
        self._servers.clear()
