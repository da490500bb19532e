"""``mesh serve`` as a child process, and what a test needs to talk to it."""

from __future__ import annotations

import json
import os
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import sniffio

from mesh.testing._process import SPAWN_TIMEOUT, read_announcement, stop_process
from transports import WebSocketStream, open_websocket

__all__ = ["Daemon", "spawn_daemon"]


@dataclass(frozen=True, slots=True)
class Daemon:
    """A ``mesh serve`` process: its URLs, the admin token it wrote, and the process.

    ``client()`` is an ``httpx.AsyncClient`` on the daemon that presents the admin
    token (and trusts ``ca`` for an https daemon); ``env()`` is what a ``mesh``
    CLI subprocess needs to talk to it.
    """

    http: str
    ws: str
    process: anyio.abc.Process
    token: str | None = None
    data_dir: str | None = None
    ca: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=self.ca) if self.ca else None

    def client(self, *, token: str | None = None, timeout: float = 15.0) -> httpx.AsyncClient:
        """An HTTP client on the daemon with the admin token (or ``token``)."""
        headers = {"Authorization": f"Bearer {token}"} if token else self.headers
        verify: Any = self.ssl_context() or True
        return httpx.AsyncClient(
            base_url=self.http, headers=headers, timeout=timeout, verify=verify
        )

    def env(self, **extra: str) -> dict[str, str]:
        """The environment for a ``mesh`` CLI subprocess: this process's, plus the daemon's
        URL, token and CA."""
        env = {**os.environ, "MESH_URL": self.http, **extra}
        if self.token:
            env.setdefault("MESH_TOKEN", self.token)
        if self.ca:
            env["MESH_CA"] = self.ca
        return env

    def open_events(
        self, path: str, *, token: str | None = None
    ) -> AbstractAsyncContextManager[WebSocketStream]:
        """A WebSocket on ``path`` (``/agents/events``, ``/rooms/ID/events``) with the token."""
        url = self.ws.removesuffix("/ws") + path
        return open_websocket(url, token=token or self.token, ssl_context=self.ssl_context())

    async def wait_online(
        self, *agent_ids: str, timeout: float = SPAWN_TIMEOUT
    ) -> dict[str, dict[str, Any]]:
        """Until every named agent is online; every agent as last shown (``GET /agents`` form).

        Watches ``/agents/events`` (a snapshot, then each status change): no polling.
        """
        agents: dict[str, dict[str, Any]] = {}
        with anyio.fail_after(timeout):
            async with self.open_events("/agents/events") as events:
                while not all(agents.get(a, {}).get("status") == "online" for a in agent_ids):
                    event = json.loads(await events.receive())
                    shown = event["agents"] if event["type"] == "snapshot" else [event["agent"]]
                    agents.update((agent["id"], agent) for agent in shown)
        return agents


@asynccontextmanager
async def spawn_daemon(
    manifests: str | os.PathLike[str],
    *,
    env: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    backend: str | None = None,
    ca: str | None = None,
) -> AsyncIterator[Daemon]:
    """Run ``mesh serve --port 0`` on a manifests directory; stop it (SIGTERM) afterwards.

    Without ``--data-dir`` in ``extra_args`` (or ``MESH_DATA_DIR`` in ``env``) the
    daemon gets a fresh temporary data directory, removed afterwards. The admin
    token it writes there on first start is read into :attr:`Daemon.token`. Give
    ``ca`` (a CA bundle) when ``extra_args`` turn TLS on.
    """
    with tempfile.TemporaryDirectory(prefix="mesh-daemon-") as scratch:
        args = list(extra_args)
        if "--data-dir" not in args and "MESH_DATA_DIR" not in (env or {}):
            args += ["--data-dir", scratch]
        async with _spawn_daemon(manifests, env, args, backend, ca) as daemon:
            yield daemon


@asynccontextmanager
async def _spawn_daemon(
    manifests: str | os.PathLike[str],
    env: dict[str, str] | None,
    extra_args: Sequence[str],
    backend: str | None,
    ca: str | None,
) -> AsyncIterator[Daemon]:
    command = [
        sys.executable,
        "-m",
        "mesh.cli",
        "serve",
        "--port",
        "0",
        "--manifests",
        str(manifests),
        "--backend",
        backend or sniffio.current_async_library(),
        "--log-format",
        "json",
        *extra_args,
    ]
    process = await anyio.open_process(command, env={**os.environ, **(env or {})}, stderr=None)
    try:
        announced = await read_announcement(process)
        token_file = announced.get("admin_token_file")
        token = (await anyio.Path(token_file).read_text()).strip() if token_file else None
        data_dir = str(Path(token_file).parent) if token_file else None
        yield Daemon(announced["http"], announced["ws"], process, token, data_dir, ca)
    finally:
        with anyio.CancelScope(shield=True):
            await stop_process(process)
