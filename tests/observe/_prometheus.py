"""Debian's Prometheus for the tests: ``promtool check metrics`` and a real server on loopback.

``make test`` installs the package (scripts/ensure-prometheus.sh); a missing binary fails.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
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


@asynccontextmanager
async def run_prometheus(workdir: Path, target: str, token: str) -> AsyncIterator[str]:
    """A Prometheus server scraping ``target`` (host:port) every second; yields its URL."""
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
        "--log.level=warn",
    ]
    url = f"http://127.0.0.1:{port}"
    process = await anyio.open_process(command, stdout=subprocess.DEVNULL, stderr=None)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=5) as http:
            await wait_for(http, lambda: _ready(http), START_TIMEOUT)
        yield url
    finally:
        with anyio.CancelScope(shield=True):
            process.terminate()
            with anyio.move_on_after(30):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _ready(http: httpx.AsyncClient) -> bool:
    try:
        return (await http.get("/-/ready")).status_code == 200
    except httpx.TransportError:
        return False


async def wait_for(http: httpx.AsyncClient, check: Any, timeout: float) -> None:
    """Until ``await check()`` is true. Prometheus has no way to push "scraped" to us, so
    this asks it again every tenth of a second, bounded by ``timeout``."""
    with anyio.fail_after(timeout):
        while not await check():  # noqa: ASYNC110 - an outside server: nothing to wait on
            await anyio.sleep(0.1)


async def query(url: str, promql: str) -> list[dict[str, Any]]:
    """The result vector of an instant PromQL query through the HTTP API."""
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        reply = await http.get("/api/v1/query", params={"query": promql})
    body = reply.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result
