"""A caller that goes away cancels its call, on every HTTP route of the daemon: the
MCP server the daemon mounts (the mcp SDK's ``MCPServer``) sees its tool cancelled.

- ``POST /rpc``, when the client disconnects mid-call;
- ``/mcp`` with a 2026-07-28 client (fastmcp's ``Client`` and the SDK's, in their default
  mode), which cancels by closing the request's response stream;
- ``/mcp`` with a handshake-era client, which POSTs ``notifications/cancelled``;
- ``/mcp`` sessionless ``notifications/cancelled``: it reaches its owner's request
  (each such request runs in an exchange of its own), and no one else's.

The tests share one daemon and its peer per backend: each starts from no call waiting,
ends with none, and counts the cancels it caused as a difference.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.client import Client

from mesh.mcp._revisions import envelope
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.mcp.test_mount import stdio_manifest
from tests.mcp.test_serve import over_http

pytestmark = pytest.mark.anyio

WITHIN = 60.0
#: The peer's call deadline, past every wait here: a `wait` the deadline ended would
#: pass for one the caller's leaving cancelled (the manifest's default is 30 s).
CALL_TIMEOUT = 600.0
MCP = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@asynccontextmanager
async def daemon_with_peer(tmp_path: Path) -> AsyncIterator[Daemon]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    manifest = stdio_manifest(manifests)
    manifest.write_text(f"call_timeout = {CALL_TIMEOUT}\n" + manifest.read_text())
    data = ["--data-dir", str(tmp_path / "data")]
    async with spawn_daemon(manifests, extra_args=data) as daemon:
        await daemon.wait_online("peer", timeout=60)
        yield daemon


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """The daemon and its MCP peer, started once per backend: each test's state is its own
    call and its client's connection, and the peer's counters are read as differences."""
    async with daemon_with_peer(tmp_path_factory.mktemp("mcp-cancel")) as shared:
        yield shared


async def peer_count(daemon: Daemon, tool: str) -> int:
    async with daemon.client() as http:
        body = {"agent": "peer", "method": "tools/call", "params": {"name": tool}}
        answer = await http.post("/rpc", json=body)
    assert answer.status_code == 200, answer.text
    count: int = answer.json()["result"]["result"]
    return count


async def until(daemon: Daemon, tool: str, count: int) -> None:
    """Ask the peer (each ask a round trip) until its counter says ``count``."""
    with anyio.fail_after(WITHIN):
        while await peer_count(daemon, tool) != count:
            await anyio.lowlevel.checkpoint()


async def quiet_peer(daemon: Daemon) -> int:
    """The peer's cancels so far, once no call waits in it (a test starts from there)."""
    assert await peer_count(daemon, "waiting") == 0
    return await peer_count(daemon, "cancelled")


async def leave_mid_call(daemon: Daemon, call: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """Start ``call`` (a 600 s `wait`), give up once the tool sleeps, and see it cancelled."""
    cancelled = await quiet_peer(daemon)
    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await until(daemon, "waiting", 1)
        tg.cancel_scope.cancel()
    await until(daemon, "cancelled", cancelled + 1)
    await until(daemon, "waiting", 0)


async def test_rpc_client_that_disconnects_cancels_its_call(daemon: Daemon) -> None:
    async with daemon.client(timeout=WITHIN) as http:
        params = {"name": "wait", "arguments": {"seconds": 600}}
        body = {"agent": "peer", "method": "tools/call", "params": params, "timeout": 120}
        await leave_mid_call(daemon, lambda: http.post("/rpc", json=body))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_mcp_sdk_client_that_gives_up_cancels_its_call(daemon: Daemon, mode: Any) -> None:
    async with Client(over_http(daemon), mode=mode) as client:
        await leave_mid_call(daemon, lambda: client.call_tool("peer__wait", {"seconds": 600}))
        assert (await client.call_tool("peer__add", {"a": 1, "b": 2})).structured_content


#: fastmcp's Client runs on asyncio only, so it runs in a process of its own: it calls
#: `wait`, gives up when told (a line on stdin), and leaves when told again.
FASTMCP_CLIENT = """
import asyncio, sys
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

async def main(url, token):
    transport = StreamableHttpTransport(url, headers={"Authorization": "Bearer " + token})
    async with Client(transport) as client:
        print(client.protocol_version, flush=True)
        call = asyncio.ensure_future(client.call_tool("peer__wait", {"seconds": 600}))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        print("gave up", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_fastmcp_client_that_gives_up_cancels_its_call(daemon: Daemon) -> None:
    cancelled = await quiet_peer(daemon)
    assert daemon.token is not None
    command = [sys.executable, "-c", FASTMCP_CLIENT, f"{daemon.http}/mcp", daemon.token]
    async with await anyio.open_process(command, stderr=None) as client:
        assert client.stdin is not None and client.stdout is not None
        lines = BufferedByteReceiveStream(client.stdout)
        with anyio.fail_after(WITHIN):
            assert await lines.receive_until(b"\n", 100) == b"2026-07-28"  # default mode
        await until(daemon, "waiting", 1)
        await client.stdin.send(b"give up\n")
        with anyio.fail_after(WITHIN):
            assert await lines.receive_until(b"\n", 100) == b"gave up"
        await until(daemon, "cancelled", cancelled + 1)
        await client.stdin.send(b"bye\n")
        with anyio.fail_after(WITHIN):
            assert await client.wait() == 0
    await until(daemon, "waiting", 0)


def wait_request(request_id: int) -> dict[str, Any]:
    arguments = {"seconds": 600}
    params = {"name": "peer__wait", "arguments": arguments, "_meta": envelope()}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def cancel(request_id: int) -> dict[str, Any]:
    params = {"requestId": request_id, "_meta": envelope()}
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


async def test_a_sessionless_cancel_reaches_its_owners_request_only(daemon: Daemon) -> None:
    cancelled = await quiet_peer(daemon)
    async with daemon.client() as admin:
        made = await admin.post("/tokens", json={"role": "client", "name": "other"})
        other_token = made.json()["token"]
    async with (
        daemon.client(timeout=WITHIN) as owner,
        daemon.client(token=other_token, timeout=WITHIN) as other,
    ):
        answers: list[httpx.Response] = []

        async def call() -> None:
            answers.append(await owner.post("/mcp", json=wait_request(7), headers=MCP))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await until(daemon, "waiting", 1)
            # Another client's cancel of "its" request 7 is no cancel of ours...
            refused = await other.post("/mcp", json=cancel(7), headers=MCP)
            assert refused.status_code == 202
            assert await peer_count(daemon, "waiting") == 1
            # ...the owner's is.
            assert (await owner.post("/mcp", json=cancel(7), headers=MCP)).status_code == 202
        (answer,) = answers
        assert answer.json()["error"]["message"] == "cancelled by the client", answer.text
        await until(daemon, "cancelled", cancelled + 1)
    await until(daemon, "waiting", 0)
