"""The MCP Python SDK: `tools/call` of an `echo` tool, over stdio and streamable HTTP.

Server (``python -m bench.baselines.mcp_peer stdio|http``): the SDK's
high-level server with one ``echo`` tool. In mcp 2.x FastMCP is renamed
``mcp.server.mcpserver.MCPServer`` (``mcp.server.fastmcp`` raises on import).
Over HTTP it is the SDK's Starlette app (stateful sessions, SSE replies: the
defaults) under uvicorn (h11, asyncio loop) on a socket bound to port 0.
Client: the SDK's own `ClientSession` over `stdio_client` or
`streamable_http_client`, one session shared by all callers.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from bench._children import (
    ENV_TWEAKS,
    REPO_ROOT,
    announce_port,
    die_with_parent,
    listen_socket,
    open_server,
    python_module,
)
from bench._measure import measure_calls
from bench._registry import Measurement, RunContext, scenario

if TYPE_CHECKING:
    from mcp import ClientSession

ARGUMENTS = {"text": "hello, agent mesh"}


def _make_server() -> Any:
    from mcp.server.mcpserver import MCPServer

    # WARNING: the SDK logs every request at INFO, which would measure stderr.
    server = MCPServer("bench-echo", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    return server


async def _serve_http() -> None:
    import uvicorn

    app = _make_server().streamable_http_app()
    sock = listen_socket()
    config = uvicorn.Config(
        app, http="h11", loop="asyncio", log_level="warning", access_log=False, lifespan="on"
    )
    announce_port(sock.getsockname()[1])
    await uvicorn.Server(config).serve(sockets=[sock])


@contextlib.asynccontextmanager
async def _open_stdio_session() -> AsyncIterator[ClientSession]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    # stdio_client passes the child only a filtered environment: add ours back.
    env = {k: os.environ[k] for k in ENV_TWEAKS if k in os.environ}
    env["PYTHONPATH"] = str(REPO_ROOT)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", __name__, "stdio"], env=env, cwd=REPO_ROOT
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def _open_http_session() -> AsyncIterator[ClientSession]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with open_server(python_module(__name__, "http")) as server:
        url = f"http://127.0.0.1:{server.port}/mcp"
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def measure_session(session: ClientSession, ctx: RunContext) -> Measurement:
    """`tools/call echo` on one session; the first reply is checked, not timed."""
    first = await session.call_tool("echo", ARGUMENTS)
    if first.is_error or "hello" not in str(first.content):
        raise RuntimeError(f"echo tool answered {first!r}")

    async def call() -> None:
        await session.call_tool("echo", ARGUMENTS)

    return await measure_calls(call, ctx)


@scenario("mcp-stdio", group="stdio", description="MCP SDK tools/call over stdio")
async def mcp_stdio(ctx: RunContext) -> Measurement:
    async with _open_stdio_session() as session:
        return await measure_session(session, ctx)


@scenario("mcp-http", group="http", description="MCP SDK tools/call over streamable HTTP")
async def mcp_http(ctx: RunContext) -> Measurement:
    async with _open_http_session() as session:
        return await measure_session(session, ctx)


def main() -> None:
    die_with_parent()
    if sys.argv[1:] == ["http"]:
        anyio.run(_serve_http)
    else:
        _make_server().run("stdio")


if __name__ == "__main__":
    main()
