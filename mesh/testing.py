"""Test helpers that ship with the package: echo-agent launchers and recorders.

Use them in your own tests as the mesh's tests do::

    async with open_echo_agent() as peer:          # the live echo agent, over stdio
        assert await peer.call_tool("echo", {"message": "hi"}) == {"message": "hi"}
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import sys
import tempfile
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import sniffio

from mesh._orchestrator.spec import open_local_stream
from mesh._rpc.connect import handshake, open_stdio_peer
from mesh._rpc.peer import Peer, RequestContext, open_peer, serve_peer
from mesh._rpc.session import SessionConfig
from mesh._sdk.agent import Agent
from transports import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameStream,
    HttpRequest,
    HttpResponse,
    TokenAuthenticator,
    TransportClosed,
    WebSocketStream,
    memory_stream_pair,
    open_http_server,
    open_websocket,
    unwrap_single_error,
    websocket_upgrade_handler,
)

__all__ = [
    "Daemon",
    "DialInEcho",
    "EchoServer",
    "KillableConnector",
    "NotificationRecorder",
    "echo_agent_command",
    "open_dial_in_echo_agent",
    "open_echo_agent",
    "open_memory_peer",
    "spawn_daemon",
    "spawn_dial_in_echo",
    "spawn_echo_server",
]

#: Starting a Python process on a loaded machine can take seconds; not minutes.
SPAWN_TIMEOUT = 20.0
#: The live echo agent, as ``python -m`` runs it.
ECHO_MODULE = "mesh.agents.echo"


def echo_agent_command(*extra: str, backend: str | None = None) -> tuple[str, list[str]]:
    """The command line that runs the live echo agent over stdio with this Python.

    ``backend`` (``"asyncio"`` or ``"trio"``) picks the agent's event loop; tests pass
    ``sniffio.current_async_library()`` to run it on their own.
    """
    chosen = ["--backend", backend] if backend is not None else []
    return sys.executable, ["-m", ECHO_MODULE, "--stdio", *chosen, *extra]


class NotificationRecorder:
    """A request handler for the *calling* side that records every notification.

    ``await recorder.wait_for(method, predicate)`` returns the first matching
    params, waiting (bounded by the caller's own ``fail_after``) if none came yet.
    """

    def __init__(self) -> None:
        self.received: defaultdict[str, list[Any]] = defaultdict(list)
        self._changed = anyio.Event()

    async def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        from mesh._errors import MethodNotFound

        raise MethodNotFound(f"the test client serves no methods ({method!r})")

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        self.received[method].append(params)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, method: str, predicate: Callable[[Any], bool] = lambda _: True) -> Any:
        while True:
            for params in self.received[method]:
                if predicate(params):
                    return params
            await self._changed.wait()


@asynccontextmanager
async def open_echo_agent(
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
    backend: str | None = None,
    extra_args: Sequence[str] = (),
) -> AsyncIterator[Peer]:
    """Start the live echo agent as a child process and connect to it over stdio.

    ``backend`` picks the agent's event loop (default: the caller's).
    """
    command, args = echo_agent_command(
        *extra_args, backend=backend or sniffio.current_async_library()
    )
    async with open_stdio_peer(command, args, agent="echo", config=config, handler=handler) as peer:
        yield peer


class KillableConnector:
    """A connector (see :class:`mesh.AgentSpec`) to ``agent`` served in this process, over
    the memory transport, that a test can kill for good: the link drops and every
    later connection attempt fails, as with an agent process that died.

    It is :func:`mesh.local_connector` with a kill switch.
    """

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.dead = False
        self._kill = anyio.Event()

    def kill(self) -> None:
        self.dead = True
        self._kill.set()

    @asynccontextmanager
    async def __call__(self) -> AsyncIterator[FrameStream]:
        if self.dead:
            raise TransportClosed("the agent is dead")
        async with open_local_stream(self.agent, stop=self._kill) as stream:
            yield stream


@asynccontextmanager
async def open_memory_peer(
    agent: Agent,
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
) -> AsyncIterator[Peer]:
    """Serve ``agent`` in this process over an in-memory link; yield the client side."""
    client_stream, server_stream = memory_stream_pair(max_frame_size=max_frame_size)
    with unwrap_single_error():
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_peer, server_stream, agent)
            async with open_peer(
                client_stream, handler=handler, config=config, agent=agent.id
            ) as peer:
                yield peer
            await server_stream.aclose()


@dataclass(frozen=True, slots=True)
class EchoServer:
    """The echo agent as a network server: where to reach it, and its process."""

    http: str
    ws: str
    process: anyio.abc.Process
    token: str | None


@asynccontextmanager
async def spawn_echo_server(
    *,
    token: str | None = None,
    backend: str | None = None,
    address: str = "127.0.0.1:0",
    extra_args: Sequence[str] = (),
    module: str = ECHO_MODULE,
) -> AsyncIterator[EchoServer]:
    """Run ``python -m mesh.agents.echo --http ADDRESS`` (port 0: any) and yield its addresses.

    ``module`` runs another agent module the same way (one that adds tools to the echo
    agent, say); it must take ``run_agent``'s flags and be importable from here.
    """
    command = sys.executable
    args = ["-m", module, "--http", address]
    args += ["--backend", backend or sniffio.current_async_library()]
    env = dict(os.environ)
    if token is not None:
        args += ["--token-env", "ECHO_TOKEN"]
        env["ECHO_TOKEN"] = token
    process = await anyio.open_process([command, *args, *extra_args], env=env, stderr=None)
    try:
        announced = await _announcement(process)
        yield EchoServer(announced["http"], announced["ws"], process, token)
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)


async def _stop(process: anyio.abc.Process) -> None:
    if process.returncode is None:
        with suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)  # a test may have stopped it
        process.terminate()
        with anyio.move_on_after(5):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
    await process.aclose()


@dataclass(frozen=True, slots=True)
class DialInEcho:
    """An echo agent process that dialled in to us, and our Peer to it."""

    peer: Peer
    process: anyio.abc.Process


@asynccontextmanager
async def spawn_dial_in_echo(
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
    backend: str | None = None,
    token: str = "dial-in-secret",
) -> AsyncIterator[DialInEcho]:
    """Listen on a loopback port and let the echo agent process dial in (``--connect``)."""
    links, incoming = anyio.create_memory_object_stream[WebSocketStream](1)
    done = anyio.Event()

    async def accept(stream: WebSocketStream, agent_id: str | None) -> None:
        await links.send(stream)
        await done.wait()

    async def no_http(request: HttpRequest) -> HttpResponse:
        return HttpResponse.error(404, "only /ws here")

    upgrade = websocket_upgrade_handler(accept, authenticator=TokenAuthenticator({token: "echo"}))
    command, args = sys.executable, ["-m", ECHO_MODULE]
    async with links, incoming, open_http_server(no_http, upgrade_handler=upgrade) as server:
        args += ["--connect", f"{server.ws_url}/ws", "--token-env", "ECHO_TOKEN"]
        args += ["--backend", backend or sniffio.current_async_library()]
        env = {**os.environ, "ECHO_TOKEN": token}
        process = await anyio.open_process([command, *args], env=env, stdout=None, stderr=None)
        try:
            with anyio.fail_after(SPAWN_TIMEOUT):
                stream = await incoming.receive()
            async with open_peer(stream, handler=handler, config=config, agent="echo") as peer:
                await handshake(peer, timeout=SPAWN_TIMEOUT)
                yield DialInEcho(peer, process)
        finally:
            done.set()
            with anyio.CancelScope(shield=True):
                await _stop(process)


@asynccontextmanager
async def open_dial_in_echo_agent(
    *,
    handler: NotificationRecorder | None = None,
    config: SessionConfig | None = None,
    backend: str | None = None,
    token: str = "dial-in-secret",
) -> AsyncIterator[Peer]:
    """Listen on a loopback port, let the echo agent process dial in, yield a Peer to it."""
    async with spawn_dial_in_echo(
        handler=handler, config=config, backend=backend, token=token
    ) as echo:
        yield echo.peer


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

    async def wait_online(self, *agent_ids: str, timeout: float = 20) -> dict[str, dict[str, Any]]:
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


async def _announcement(process: anyio.abc.Process) -> dict[str, Any]:
    """The JSON line a server prints on stdout once it listens."""
    assert process.stdout is not None
    line = b""
    with anyio.fail_after(SPAWN_TIMEOUT):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive(1)
            line += chunk
    announced: dict[str, Any] = json.loads(line)
    return announced


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
        announced = await _announcement(process)
        token_file = announced.get("admin_token_file")
        token = (await anyio.Path(token_file).read_text()).strip() if token_file else None
        data_dir = str(Path(token_file).parent) if token_file else None
        yield Daemon(announced["http"], announced["ws"], process, token, data_dir, ca)
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
