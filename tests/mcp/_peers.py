"""The MCP peers the tests run against, and ways to start them.

- ``mcp_server.py``: an ``MCPServer`` from the ``mcp`` SDK (a dev dependency), over
  stdio or streamable HTTP.
- ``peers/``: the npm packages ``@modelcontextprotocol/server-everything``,
  ``server-filesystem``, ``@modelcontextprotocol/inspector`` and the official
  conformance suite ``@modelcontextprotocol/conformance`` with the Node 22 it needs
  (the npm ``node`` package; see ``_conformance.py``), pinned by
  ``package-lock.json`` and installed by ``make test`` (``npm ci``). Without node those
  tests skip and say so, unless ``MESH_REQUIRE_NODE=1`` (set by ``make test``) or ``CI``
  makes a missing node a failure, as a missing browser is; with node but without the
  install they fail, and say how to fix it.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MCP_SERVER = HERE / "mcp_server.py"
OAUTH_SERVER = HERE / "oauth_server.py"
PEERS = HERE / "peers"
#: Starting a Python process that imports the mcp SDK takes a second or two; a loaded
#: machine may take several.
START_TIMEOUT = 30.0

_LISTENING = re.compile(rb"Uvicorn running on (http://\S+)")

#: What keeps coverage out of a Python child that runs none of the mesh's code (the SDK's
#: servers, a fastmcp client): under ``make test`` coverage starts in every Python child
#: whose environment carries these (its start-up hook reads them, and empty starts
#: nothing), where it would measure nothing and cost about a second of CPU a process.
WITHOUT_COVERAGE = {"COVERAGE_PROCESS_START": "", "COVERAGE_PROCESS_CONFIG": ""}
#: The environment of a peer this suite writes (``mcp_server.py``, ``oauth_server.py``).
PEER_ENV = {"PYTHONPATH": str(ROOT), **WITHOUT_COVERAGE}


def mcp_server_command() -> tuple[str, list[str]]:
    return sys.executable, [str(MCP_SERVER)]


def node_bin(package: str, script: str) -> list[str]:
    """``node <script>`` of an installed npm peer (skips without node, fails without install)."""
    node = shutil.which("node")
    if node is None:
        missing = "node is not installed: the npm MCP peers need Node.js 20 (see tests/mcp)"
        if os.environ.get("MESH_REQUIRE_NODE") == "1" or os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    path = PEERS / "node_modules" / package / script
    if not path.exists():
        pytest.fail(
            f"the npm MCP peers are not installed ({path} is missing): "
            "run `make test`, or `npm ci` in tests/mcp/peers"
        )
    return [node, str(path)]


def everything_command() -> list[str]:
    return [*node_bin("@modelcontextprotocol/server-everything", "dist/index.js"), "stdio"]


def filesystem_command(*allowed: str) -> list[str]:
    """npm ``@modelcontextprotocol/server-filesystem`` over stdio, serving ``allowed`` dirs."""
    script = node_bin("@modelcontextprotocol/server-filesystem", "dist/index.js")
    return [*script, *allowed]


def inspector_command() -> list[str]:
    """The inspector in CLI mode (a real MCP client); append the target and ``--method ...``."""
    return [*node_bin("@modelcontextprotocol/inspector", "cli/build/cli.js"), "--cli"]


@asynccontextmanager
async def spawn_mcp_http_server() -> AsyncIterator[str]:
    """``mcp_server.py http`` as a child; yields its MCP URL once it listens."""
    process = await anyio.open_process(
        [sys.executable, str(MCP_SERVER), "http"],
        stdout=None,
        env={**os.environ, **PEER_ENV},
    )
    try:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(START_TIMEOUT):
            while not (match := _LISTENING.search(seen)):
                seen += await process.stderr.receive()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, process.stderr)
            yield match.group(1).decode() + "/mcp"
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            process.kill()
            await process.wait()
            await process.aclose()


def _free_port() -> int:
    """A loopback port nobody listens on now (the TypeScript server takes its port from
    ``PORT`` and prints that value, so the port must be chosen before it starts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def spawn_everything_http_server() -> AsyncIterator[str]:
    """npm ``server-everything streamableHttp`` (the TypeScript SDK 1.x server side, with
    sessions and an event store) as a child; yields its MCP URL once it listens."""
    command = [*node_bin("@modelcontextprotocol/server-everything", "dist/index.js")]
    port = _free_port()
    process = await anyio.open_process(
        [*command, "streamableHttp"],
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PORT": str(port)},
    )
    try:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(START_TIMEOUT):
            while b"listening on port" not in seen:
                chunk = await process.stderr.receive()
                seen += chunk
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, process.stderr)
            yield f"http://127.0.0.1:{port}/mcp"
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            process.kill()
            await process.wait()
            await process.aclose()


@asynccontextmanager
async def spawn_oauth_server() -> AsyncIterator[str]:
    """``oauth_server.py`` (an MCP server and its authorization server) as a child;
    yields its MCP URL once it listens."""
    port = _free_port()
    process = await anyio.open_process(
        [sys.executable, str(OAUTH_SERVER), str(port)],
        stdout=subprocess.DEVNULL,
        env={**os.environ, **PEER_ENV},
    )
    try:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(START_TIMEOUT):
            while not _LISTENING.search(seen):
                seen += await process.stderr.receive()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, process.stderr)
            yield f"http://127.0.0.1:{port}/mcp"
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            process.kill()
            await process.wait()
            await process.aclose()


async def _drain(stream: anyio.abc.ByteReceiveStream) -> None:
    """Keep reading the server's log so its pipe never fills and blocks it."""
    async for _ in stream:
        pass
