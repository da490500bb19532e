"""MCP both ways: a mounted MCP server against the SDK's own client, and the mesh serving MCP
against the SDK's ``MCPServer``.

Mounting (group ``stdio``): ``mesh-mcp-mount`` calls the ``echo`` tool of the same
``MCPServer`` the ``mcp-stdio`` baseline runs (``bench.baselines.mcp_peer stdio``),
through a `mesh.MeshOrchestrator` that mounts it (``mesh.mcp.mcp_connector``): the
mesh's call, the in-memory link to the mount, the MCP codec, the pipe. The baseline
is the SDK's ``ClientSession`` calling it directly.

Serving (group ``mcp-serve``): one minimal JSON-RPC client (here: ``initialize``,
then ``tools/call`` with integer ids, pipelined by id for 64 in flight) drives
``mcp-server-raw`` (``MCPServer`` over stdio, its tool in-process) and
``mesh-mcp-serve`` (``mesh mcp`` relaying stdio to a ``mesh serve`` daemon whose
echo agent is a stdio child: three hops where ``MCPServer`` has one). Over HTTP,
one minimal client (raw h11, a keep-alive connection per caller, JSON or SSE answers) drives
``mcp-server-http`` (the SDK's app under uvicorn) and ``mesh-mcp-http`` (the daemon's
``/mcp``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11
import msgspec

from bench._children import REPO_ROOT, open_server, python_module, stop_process
from bench._measure import BatchedSender, LineReader, Pending, measure_calls
from bench._registry import Measurement, RunContext, scenario
from bench.mesh_scenarios import LISTENING_LINE, quiet_logs, stdio_env

TEXT = "hello, agent mesh"
#: The baseline (the SDK's ClientSession) speaks 2025-11-25 with the server; so does the mount,
#: so both time the same server code (BENCH_MCP_REVISION=auto measures 2026-07-28).
REVISION: Any = os.environ.get("BENCH_MCP_REVISION", "2025-11-25")
_encoder = msgspec.json.Encoder()


class _Reply(msgspec.Struct):
    id: int | None = None
    result: Any = None
    error: Any = None


_decode_reply = msgspec.json.Decoder(_Reply).decode


# -- mounting -------------------------------------------------------------------------------


@scenario(
    "mesh-mcp-mount",
    group="stdio",
    baseline="mcp-stdio",
    description="mesh: an MCPServer's tool, mounted, called through the orchestrator",
    smoke_modes=("sequential",),
)
async def mesh_mcp_mount(ctx: RunContext) -> Measurement:
    from functools import partial

    from mesh import EMBEDDER, AgentSpec, MeshOrchestrator
    from mesh.mcp import mcp_connector
    from transports import open_stdio_process

    quiet_logs()
    command = python_module("bench.baselines.mcp_peer", "stdio")
    wire = partial(open_stdio_process, command[0], command[1:], env=stdio_env(), cwd=REPO_ROOT)
    connector = mcp_connector(wire, agent="echo", revision=REVISION)
    spec = AgentSpec("echo", connector, transport="stdio")
    async with MeshOrchestrator([spec], connect_timeout=30) as mesh:
        first = await mesh.call_tool("echo", "echo", {"text": TEXT}, on_behalf_of=EMBEDDER)
        if TEXT not in str(first):
            raise RuntimeError(f"the mounted echo tool answered {first!r}")

        async def call() -> None:
            await mesh.call_tool("echo", "echo", {"text": TEXT}, on_behalf_of=EMBEDDER)

        result = await measure_calls(call, ctx)
        result.notes["revision"] = str(REVISION)
        return result


# -- serving: the minimal JSON-RPC client over stdio ---------------------------------------


def _call_frame(call_id: int, tool: str, arguments: dict[str, Any]) -> bytes:
    params = {"name": tool, "arguments": arguments}
    request = {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params}
    return _encoder.encode(request) + b"\n"


_HELLO = (
    _encoder.encode(
        {
            "jsonrpc": "2.0",
            "id": -1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        }
    )
    + b"\n"
    + b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
)


async def drive_stdio(
    process: anyio.abc.Process, tool: str, arguments: dict[str, Any], ctx: RunContext
) -> Measurement:
    """``initialize``, then ``tools/call`` by the JSON-RPC lines of one process's stdio."""
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, lines = process.stdin, LineReader(process.stdout)
    await stdin.send(_HELLO)
    with anyio.fail_after(30):
        while _decode_reply(await lines.receive_line()).id != -1:
            pass
    pending = Pending()
    sender = BatchedSender(stdin)

    async def read_replies() -> None:
        while True:
            reply = _decode_reply(await lines.receive_line())
            if reply.error is not None:
                raise RuntimeError(f"the server answered {reply.error!r}")
            if reply.id is not None:
                pending.resolve(reply.id)

    async def call() -> None:
        call_id, done = pending.open()
        sender.send_nowait(_call_frame(call_id, tool, arguments))
        await done.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_replies)
        tg.start_soon(sender.run)
        result = await measure_calls(call, ctx)
        tg.cancel_scope.cancel()
    return result


@scenario(
    "mcp-server-raw",
    group="mcp-serve",
    description="MCPServer over stdio, driven by a minimal JSON-RPC client",
    smoke_modes=("sequential",),
)
async def mcp_server_raw(ctx: RunContext) -> Measurement:
    command = python_module("bench.baselines.mcp_peer", "stdio")
    process = await anyio.open_process(command, stderr=None, env=_env())
    try:
        return await drive_stdio(process, "echo", {"text": TEXT}, ctx)
    finally:
        await stop_process(process)


@contextlib.asynccontextmanager
async def open_daemon(backend: str) -> AsyncIterator[tuple[str, str]]:
    """``mesh serve`` with the echo agent over stdio; yields its URL and admin token once
    the agent is online."""
    from mesh.daemon._tokens import ADMIN_TOKEN_FILE
    from mesh.testing import Daemon

    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        manifests = Path(tmp, "manifests")
        manifests.mkdir()  # noqa: ASYNC240 - once, before anything runs
        args = ["-m", "mesh.agents.echo", "--stdio", "--log-level", "warning"]
        env = ", ".join(f"{key} = {json.dumps(value)}" for key, value in stdio_env().items())
        (manifests / "echo.toml").write_text(
            f'id = "echo"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
            f"args = {json.dumps([*args, '--backend', backend])}\nenv = {{ {env} }}\n"
        )
        command = [
            *python_module("mesh.cli", "serve", "--port", "0"),
            *("--manifests", str(manifests), "--data-dir", str(Path(tmp, "data"))),
            *("--log-level", "warning", "--backend", backend),
        ]
        async with open_server(command, port_line=LISTENING_LINE) as server:
            url = f"http://127.0.0.1:{server.port}"
            token = Path(tmp, "data", ADMIN_TOKEN_FILE).read_text().strip()  # noqa: ASYNC240
            daemon = Daemon(url, f"ws://127.0.0.1:{server.port}/ws", server.process, token=token)
            await daemon.wait_online("echo")
            yield url, token


def _env(token: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    if token is not None:
        env["MESH_TOKEN"] = token
    return env


@scenario(
    "mcp-relay-raw",
    group="mcp-serve",
    modes=("sequential",),
    description="the floor of mesh-mcp-serve: its three process hops, raw relays, no mesh code",
    smoke_modes=("sequential",),
)
async def mcp_relay_raw(ctx: RunContext) -> Measurement:
    hub = python_module("bench.baselines.mcp_relay", "hub", ctx.backend)
    async with open_server(hub) as server:
        url = f"ws://127.0.0.1:{server.port}/"
        command = python_module("bench.baselines.mcp_relay", "relay", ctx.backend, url)
        process = await anyio.open_process(command, stderr=None, env=_env())
        try:
            return await drive_stdio(process, "echo__echo", {"message": TEXT}, ctx)
        finally:
            await stop_process(process)


@scenario(
    "mesh-mcp-serve",
    group="mcp-serve",
    baseline=("mcp-server-raw", "mcp-relay-raw"),
    description="`mesh mcp` (stdio) -> daemon -> echo agent (stdio), same client",
    smoke_modes=("sequential",),
    setup_allowance_s=60.0,
)
async def mesh_mcp_serve(ctx: RunContext) -> Measurement:
    async with open_daemon(ctx.backend) as (url, token):
        command = [
            *python_module("mesh.cli", "mcp", "--url", url),
            *("--backend", ctx.backend),
        ]
        process = await anyio.open_process(command, stderr=None, env=_env(token))
        try:
            return await drive_stdio(process, "echo__echo", {"message": TEXT}, ctx)
        finally:
            await stop_process(process)


# -- serving: the minimal JSON-RPC client over HTTP ----------------------------------------


class _H11Client:
    """The cheapest HTTP/1.1 client we can drive a server with: raw h11 over anyio sockets,
    a keep-alive connection per caller (64 for 64 in flight), no pool logic, no models.
    httpx costs ~1 ms of CPU per request here, which would measure the client, not the server."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self._host, self._port, self._path = host, port, path
        self._idle: list[tuple[anyio.abc.SocketStream, h11.Connection]] = []

    async def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        stream, conn = self._idle.pop() if self._idle else await self._open()
        try:
            answer = await self._exchange(stream, conn, body, headers)
        except BaseException:
            await stream.aclose()
            raise
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            self._idle.append((stream, conn))
        else:
            await stream.aclose()
        return answer

    async def aclose(self) -> None:
        while self._idle:
            await self._idle.pop()[0].aclose()

    async def _open(self) -> tuple[anyio.abc.SocketStream, h11.Connection]:
        return await anyio.connect_tcp(self._host, self._port), h11.Connection(h11.CLIENT)

    async def _exchange(
        self,
        stream: anyio.abc.SocketStream,
        conn: h11.Connection,
        body: bytes,
        headers: dict[str, str],
    ) -> tuple[int, dict[str, str], bytes]:
        fields = [("host", f"{self._host}:{self._port}"), ("content-length", str(len(body)))]
        request = h11.Request(method="POST", target=self._path, headers=[*fields, *headers.items()])
        await stream.send(
            conn.send(request) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
        )
        status, answer_headers, content = 0, {}, bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    conn.receive_data(await stream.receive(65536))
                except anyio.EndOfStream:
                    conn.receive_data(b"")
            elif isinstance(event, h11.Response):
                status = event.status_code
                answer_headers = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                content += event.data
            elif isinstance(event, h11.EndOfMessage):
                return status, answer_headers, bytes(content)
            elif isinstance(event, h11.ConnectionClosed):
                raise RuntimeError("the server closed the connection mid-answer")


async def drive_http(
    url: str, tool: str, arguments: dict[str, Any], ctx: RunContext, token: str | None = None
) -> Measurement:
    """The same calls as POSTs (raw h11, one keep-alive connection per caller); JSON or SSE
    answers."""
    endpoint = urlsplit(url)
    http = _H11Client(endpoint.hostname or "127.0.0.1", endpoint.port or 80, endpoint.path)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    try:
        status, answer, _ = await http.post(_HELLO.split(b"\n")[0], headers)
        if status != 200:
            raise RuntimeError(f"initialize answered HTTP {status}")
        if session := answer.get("mcp-session-id"):
            headers["mcp-session-id"] = session
        headers["mcp-protocol-version"] = "2025-11-25"
        status, _, _ = await http.post(_HELLO.split(b"\n")[1], headers)
        if status >= 300:
            raise RuntimeError(f"notifications/initialized answered HTTP {status}")
        ids = iter(range(10**9))

        async def call() -> None:
            status, _, content = await http.post(_call_frame(next(ids), tool, arguments), headers)
            if status != 200 or _last_reply(content).error is not None:
                raise RuntimeError(f"HTTP {status}: {content[:200]!r}")

        return await measure_calls(call, ctx)
    finally:
        await http.aclose()


def _last_reply(body: bytes) -> _Reply:
    if body.startswith(b"{"):
        return _decode_reply(body)
    data = [line[5:].strip() for line in body.splitlines() if line.startswith(b"data:")]
    return _decode_reply(data[-1])


@scenario(
    "mcp-server-http",
    group="mcp-http",
    description="MCPServer's streamable HTTP app under uvicorn, minimal HTTP JSON-RPC client",
    smoke_modes=("sequential",),
)
async def mcp_server_http(ctx: RunContext) -> Measurement:
    async with open_server(python_module("bench.baselines.mcp_peer", "http")) as server:
        return await drive_http(f"http://127.0.0.1:{server.port}/mcp", "echo", {"text": TEXT}, ctx)


@scenario(
    "mcp-relay-http-raw",
    group="mcp-http",
    modes=("sequential",),
    description="the floor of mesh-mcp-http: its two process hops, raw h11 and a pipe",
    smoke_modes=("sequential",),
)
async def mcp_relay_http_raw(ctx: RunContext) -> Measurement:
    command = python_module("bench.baselines.mcp_relay", "http", ctx.backend)
    async with open_server(command) as server:
        url = f"http://127.0.0.1:{server.port}/mcp"
        return await drive_http(url, "echo__echo", {"message": TEXT}, ctx)


@scenario(
    "mesh-mcp-http",
    group="mcp-http",
    baseline=("mcp-server-http", "mcp-relay-http-raw"),
    description="the daemon's /mcp -> echo agent (stdio), same HTTP client",
    smoke_modes=("sequential",),
    setup_allowance_s=60.0,
)
async def mesh_mcp_http(ctx: RunContext) -> Measurement:
    async with open_daemon(ctx.backend) as (url, token):
        return await drive_http(f"{url}/mcp", "echo__echo", {"message": TEXT}, ctx, token)
