"""Child processes of a measurement: environment, start-up handshake, and certain death.

Servers run as separate processes on 127.0.0.1 with an ephemeral port: the
server binds port 0 and prints ``PORT <n>`` on stdout, which `open_server`
waits for. Every child is killed when its `async with` ends, and also kills
itself when its parent dies (`die_with_parent`), so a run killed on timeout
leaves nothing behind, not even a child in its own session (the MCP SDK starts
stdio servers with ``start_new_session=True``).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from bench._cpu import cpu_seconds
from bench._measure import split_lines

__all__ = [
    "ENV_TWEAKS",
    "REPO_ROOT",
    "Server",
    "announce_port",
    "bench_env",
    "child_env",
    "cpu_seconds",
    "die_with_parent",
    "listen_socket",
    "open_server",
    "python_module",
    "raise_nofile_limit",
    "rss_kib",
    "stop_process",
]

#: glibc keeps asyncio's 256 KiB read buffer on the heap instead of mapping and
#: unmapping it on every read (191 -> 119 us per WebSocket round trip when measured).
#: Set for every benchmark child unless --no-env-tweaks.
ENV_TWEAKS = {"MALLOC_MMAP_THRESHOLD_": "1048576", "MALLOC_TRIM_THRESHOLD_": "268435456"}

#: What `open_server` waits for on a server's stdout, by default.
PORT_LINE = re.compile(rb"PORT (\d+)")

#: The directory holding the `bench` package; children run with it as cwd.
REPO_ROOT = Path(__file__).resolve().parent.parent

#: A server that has not printed its port by then is broken (MCP imports take ~2 s).
STARTUP_TIMEOUT_S = 30.0
#: How long a killed child may take to be reaped before we stop waiting.
REAP_TIMEOUT_S = 5.0

#: How often a child checks that its parent is alive (`die_with_parent`).
PARENT_POLL_S = 0.5


def child_env() -> dict[str, str]:
    """Our environment, with the repo root importable: for a child that inherits settings."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return env


def bench_env(*, tweaks: bool) -> dict[str, str]:
    """The environment of one measurement's process: ENV_TWEAKS set, or removed."""
    env = child_env()
    for key, value in ENV_TWEAKS.items():
        if tweaks:
            env[key] = value
        else:
            env.pop(key, None)
    return env


def python_module(module: str, *args: str) -> list[str]:
    """The command line running `python -m module args...` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def die_with_parent() -> None:
    """Exit (SIGKILL) as soon as this process's parent is gone.

    Not ``PR_SET_PDEATHSIG``: that fires when the parent *thread* that forked us
    exits, and trio (so anyio on trio) spawns children from a worker thread that
    it retires after ~10 s idle, which killed every long-lived child of a trio
    run. A daemon thread notices re-parenting instead (within `PARENT_POLL_S`).
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def listen_socket(backlog: int = 1024) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 and an ephemeral port (for uvicorn's `sockets=`).

    proto must be IPPROTO_TCP: with proto 0 (what ``socket.socket()`` and
    ``socket.create_server()`` give) asyncio skips TCP_NODELAY on accepted
    connections, and a response written as headers then body waits ~40 ms for
    the peer's delayed ACK (Nagle). asyncio's own create_server gets proto 6
    from getaddrinfo, so only servers handed a socket are exposed.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def raise_nofile_limit() -> int:
    """Raise the soft open-files limit to the hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


def rss_kib(pid: int) -> int:
    """Resident memory of `pid` in KiB, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass(frozen=True, slots=True)
class Server:
    process: anyio.abc.Process
    port: int

    @property
    def pid(self) -> int:
        return self.process.pid


async def stop_process(process: anyio.abc.Process) -> None:
    """Kill `process` and reap it; shielded and bounded so it always finishes."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(REAP_TIMEOUT_S):
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.aclose()


async def _read_port(
    process: anyio.abc.Process, command: Sequence[str], port_line: re.Pattern[bytes]
) -> int:
    assert process.stdout is not None
    buffer = bytearray()
    with anyio.fail_after(STARTUP_TIMEOUT_S):
        while True:
            try:
                chunk = await process.stdout.receive()
            except anyio.EndOfStream:
                code = await process.wait()
                raise RuntimeError(f"server {command} exited with {code} before its port") from None
            for line in split_lines(buffer, chunk):
                if match := port_line.fullmatch(line.strip()):
                    return int(match.group(1))


@contextlib.asynccontextmanager
async def open_server(
    command: Sequence[str], *, port_line: re.Pattern[bytes] = PORT_LINE
) -> AsyncIterator[Server]:
    """Start a server child, wait for the line telling its port; kill it on exit.

    `port_line` must match a whole stdout line, with the port as group 1;
    earlier lines are skipped. The child's stderr goes to ours, so the harness
    shows it when a run fails.
    """
    process = await anyio.open_process(
        list(command), stdin=None, stderr=None, cwd=str(REPO_ROOT), env=child_env()
    )
    try:
        port = await _read_port(process, command, port_line)
        yield Server(process, port)
    finally:
        await stop_process(process)


def announce_port(port: int) -> None:
    """The server side of the handshake `open_server` waits for."""
    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()
