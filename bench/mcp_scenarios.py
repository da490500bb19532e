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
one minimal client (httpx, a pool of 64, JSON or SSE answers) drives
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

import anyio
import anyio.abc
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

    from mesh import AgentSpec, MeshOrchestrator
    from mesh.mcp import mcp_connector
    from transports import open_stdio_process

    quiet_logs()
    command = python_module("bench.baselines.mcp_peer", "stdio")
    wire = partial(open_stdio_process, command[0], command[1:], env=stdio_env(), cwd=REPO_ROOT)
    connector = mcp_connector(wire, agent="echo", revision=REVISION)
    spec = AgentSpec("echo", connector, transport="stdio")
    async with MeshOrchestrator([spec], connect_timeout=30) as mesh:
        first = await mesh.call_tool("echo", "echo", {"text": TEXT})
        if TEXT not in str(first):
            raise RuntimeError(f"the mounted echo tool answered {first!r}")

        async def call() -> None:
            await mesh.call_tool("echo", "echo", {"text": TEXT})

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
    "mesh-mcp-serve",
    group="mcp-serve",
    baseline="mcp-server-raw",
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


async def drive_http(
    url: str, tool: str, arguments: dict[str, Any], ctx: RunContext, token: str | None = None
) -> Measurement:
    """The same calls as POSTs (httpx, keep-alive pool of 64); JSON or SSE answers."""
    import httpx

    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(limits=limits, timeout=30) as http:
        hello = await http.post(url, content=_HELLO.split(b"\n")[0], headers=headers)
        hello.raise_for_status()
        session = hello.headers.get("mcp-session-id")
        if session:
            headers["mcp-session-id"] = session
        headers["mcp-protocol-version"] = "2025-11-25"
        done = await http.post(url, content=_HELLO.split(b"\n")[1], headers=headers)
        done.raise_for_status()
        ids = iter(range(10**9))

        async def call() -> None:
            body = _call_frame(next(ids), tool, arguments)
            answer = await http.post(url, content=body, headers=headers)
            reply = _last_reply(answer.content)
            if answer.status_code != 200 or reply.error is not None:
                raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:200]}")

        return await measure_calls(call, ctx)


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
    "mesh-mcp-http",
    group="mcp-http",
    baseline="mcp-server-http",
    description="the daemon's /mcp -> echo agent (stdio), same HTTP client",
    smoke_modes=("sequential",),
    setup_allowance_s=60.0,
)
async def mesh_mcp_http(ctx: RunContext) -> Measurement:
    async with open_daemon(ctx.backend) as (url, token):
        return await drive_http(f"{url}/mcp", "echo__echo", {"message": TEXT}, ctx, token)
