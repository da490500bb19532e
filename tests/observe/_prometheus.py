"""Debian's Prometheus for the tests: ``promtool check metrics`` and a real server on loopback.

``make test`` installs the package (scripts/ensure-prometheus.sh); a missing binary fails.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx

#: Prometheus is up (its /-/ready answers) well within this on a loaded machine.
START_TIMEOUT = 60.0


def binary(name: str) -> str:
    found = shutil.which(name)
    assert found is not None, f"{name} is not installed: run `make prometheus` (Debian's package)"
    return found


def promtool_check(exposition: bytes) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics`` on an exposition: exit 0 and no complaint when it is clean."""
    return subprocess.run(
        [binary("promtool"), "check", "metrics"],
        input=exposition.decode(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _free_port() -> int:
    # Prometheus prints the address it was given, not the one it bound, so the port is
    # chosen here; on loopback nothing else takes it in the moment between.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _config(target: str, token_file: Path) -> str:
    return f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: mesh
    authorization:
      type: Bearer
      credentials_file: {token_file}
    static_configs:
      - targets: ["{target}"]
"""


#: What Prometheus logs (at info) once its web API answers.
_READY_LINE = b"Server is ready to receive web requests."


@asynccontextmanager
async def run_prometheus(workdir: Path, target: str, token: str) -> AsyncIterator[str]:
    """A Prometheus server scraping ``target`` (host:port) every second; yields its URL
    once it says it is ready (its own log line, read as it comes)."""
    token_file = workdir / "scrape.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    config = workdir / "prometheus.yml"
    config.write_text(_config(target, token_file))
    port = _free_port()
    command = [
        binary("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=info",
    ]
    process = await anyio.open_process(command, stdout=subprocess.DEVNULL)
    try:
        async with anyio.create_task_group() as tg:
            ready = anyio.Event()
            said: list[bytes] = []
            tg.start_soon(_read_log, process, ready, said)
            with anyio.fail_after(START_TIMEOUT):
                await ready.wait()
            assert process.returncode is None, b"".join(said).decode(errors="replace")
            yield f"http://127.0.0.1:{port}"
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            process.terminate()
            with anyio.move_on_after(30):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _read_log(process: anyio.abc.Process, ready: anyio.Event, said: list[bytes]) -> None:
    """Sets ``ready`` at Prometheus's ready line (or when it exits before: the caller then
    shows what it said); reads on after that, so its log never fills the pipe."""
    assert process.stderr is not None
    seen = b""
    try:
        async for chunk in process.stderr:
            if not ready.is_set():
                said.append(chunk)
                seen = seen[-len(_READY_LINE) :] + chunk
                if _READY_LINE in seen:
                    ready.set()
    finally:
        await process.wait()
        ready.set()


@dataclass
class ScrapeRelay:
    """Stands between Prometheus and the daemon, counting the scrapes that pass."""

    target: str  # host:port for Prometheus's config
    scrapes: int = 0
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def wait_stored(self, timeout: float) -> None:
        """Until one whole scrape is stored. Prometheus scrapes a target, appends and commits
        the samples, and only then starts the next scrape of it: the second request to
        arrive proves the first one's samples can be queried."""
        with anyio.fail_after(timeout):
            while self.scrapes < 2:
                await self._changed.wait()

    def _saw_scrape(self) -> None:
        self.scrapes += 1
        self._changed.set()
        self._changed = anyio.Event()


@asynccontextmanager
async def relay_scrapes(target: str) -> AsyncIterator[ScrapeRelay]:
    """A loopback TCP relay to ``target`` (host:port) that counts ``GET /metrics`` requests."""
    host, _, port = target.rpartition(":")
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    relay = ScrapeRelay(f"127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}")

    async def handle(client: anyio.abc.SocketStream) -> None:
        server = await anyio.connect_tcp(host, int(port))
        async with client, server, anyio.create_task_group() as pipes:
            pipes.start_soon(_pipe, server, client, None)
            await _pipe(client, server, relay._saw_scrape)
            pipes.cancel_scope.cancel()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield relay
        tg.cancel_scope.cancel()


async def _pipe(
    source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream, on_scrape: Any
) -> None:
    """Copies ``source`` to ``sink`` until either end closes, calling ``on_scrape`` for
    each scrape request line that passes (a line may come in two reads: the tail is kept)."""
    request = b"GET /metrics "
    tail = b""
    with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        while True:
            data = await source.receive()
            if on_scrape is not None:
                seen = tail + data
                for _ in range(seen.count(request)):
                    on_scrape()
                tail = seen[-(len(request) - 1) :]
            await sink.send(data)


async def query(url: str, promql: str) -> list[dict[str, Any]]:
    """The result vector of an instant PromQL query through the HTTP API."""
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        reply = await http.get("/api/v1/query", params={"query": promql})
    body = reply.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result
