"""``mesh mcp`` and ``/mcp`` at their edges: bytes that are not UTF-8, huge names, other origins."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from mesh import ErrorCode
from mesh.mcp._server import MCP_REQUESTS_IN_PROGRESS
from mesh.testing import Daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.mcp.test_serve import JSON, PING, daemon_with_echo, mcp_lines
from transports import CloseCode, TransportClosed, open_websocket

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    async with daemon_with_echo(tmp_path_factory.mktemp("mcp-edges")) as shared:
        yield shared


async def test_a_line_that_is_not_utf8_gets_a_parse_error_and_the_relay_lives(
    daemon: Daemon,
) -> None:
    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}',
        b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
    ]
    answers = await mcp_lines(daemon, lines)  # and `mesh mcp` exits 0 when stdin closes
    assert answers[0]["id"] is None and answers[0]["error"]["code"] == -32700
    assert "UTF-8" in answers[0]["error"]["message"]
    assert answers[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}


async def test_an_error_never_echoes_a_huge_tool_name(daemon: Daemon) -> None:
    name = "n" * 10_000
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name}}
    [answer] = await mcp_lines(daemon, [json.dumps(call).encode()])
    message = answer["error"]["message"]
    assert answer["error"]["code"] == -32602 and "10000 characters" in message
    assert len(message) < 300


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://evil.example", False),
        ("http://rebound.example:{port}", False),  # DNS rebinding: the right port, a foreign name
        ("null", False),
        ("http://127.0.0.1:{port}", True),
        (None, True),  # not a browser
    ],
)
async def test_mcp_refuses_a_browser_origin_that_is_not_the_daemons_own(
    daemon: Daemon, origin: str | None, allowed: bool
) -> None:
    async with daemon.client() as http:
        port = daemon.http.rsplit(":", 1)[1]
        headers = dict(JSON)
        if origin is not None:
            headers["origin"] = origin.format(port=port)
            if "rebound" in origin:
                headers["host"] = f"rebound.example:{port}"
        answer = await http.post("/mcp", json=PING, headers=headers)
    if allowed:
        assert answer.status_code == 400  # past the Origin rule: it wants a session
    else:
        assert answer.status_code == 403, answer.text
        assert "another origin" in answer.json()["error"]["message"]


async def test_the_mcp_websocket_refuses_another_origin_too(daemon: Daemon) -> None:
    url = daemon.ws.removesuffix("/ws") + "/mcp"
    headers = [("origin", "http://evil.example")]
    async with open_websocket(url, token=daemon.token, headers=headers) as stream:
        with anyio.fail_after(10), pytest.raises(TransportClosed) as closed:
            await stream.receive()
    assert closed.value.close_code == CloseCode.FORBIDDEN
    assert "own origin" in closed.value.reason


async def test_one_mcp_websocket_holds_at_most_its_share_of_requests(daemon: Daemon) -> None:
    # A subscription holds its request until the client leaves: without a bound, one
    # socket could hold any number of them.
    url = daemon.ws.removesuffix("/ws") + "/mcp"
    meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
    extra = 3
    async with open_websocket(url, token=daemon.token) as stream:
        for n in range(MCP_REQUESTS_IN_PROGRESS + extra):
            listen = {"jsonrpc": "2.0", "id": n, "method": "subscriptions/listen", "params": meta}
            await stream.send(json.dumps(listen).encode())
        refused: list[dict[str, Any]] = []
        acknowledged = 0
        with anyio.fail_after(60):
            while len(refused) < extra or acknowledged < MCP_REQUESTS_IN_PROGRESS:
                message = json.loads(await stream.receive())
                if message.get("method") == "notifications/subscriptions/acknowledged":
                    acknowledged += 1
                elif "error" in message:
                    refused.append(message)
        assert sorted(m["id"] for m in refused) == list(
            range(MCP_REQUESTS_IN_PROGRESS, MCP_REQUESTS_IN_PROGRESS + extra)
        )
        error = refused[0]["error"]
        assert (
            error["code"] == ErrorCode.UNAVAILABLE
            and "max_requests_in_progress" in error["message"]
        )
