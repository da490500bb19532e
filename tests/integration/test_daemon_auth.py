"""A real ``mesh serve`` trusts no one by default: tokens, roles, revocation, TLS.

The route walk reads the daemon's own route table, so a route added without
its right in the table cannot slip past it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import trustme

from mesh._errors import ErrorCode
from mesh.daemon._auth import Right
from mesh.daemon._routes import ROUTES
from mesh.testing import Daemon, echo_agent_command, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from transports import CloseCode, TransportClosed, WebSocketStream, open_websocket

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """One plain daemon (no manifests) for the tests that only add tokens of their own names
    and revoke only those: starting one is most of what each of them costs."""
    async with spawn_daemon(tmp_path_factory.mktemp("auth-manifests")) as shared:
        yield shared


DIAL_IN = 'id = "dialer"\n[transport]\ntype = "dial-in"\ntoken_env = "DIALER_TOKEN"\n'


OBSERVER_RIGHTS = {Right.PUBLIC, Right.READ}
CLIENT_RIGHTS = {Right.PUBLIC, Right.READ, Right.CALL, Right.REGISTER, Right.ROOMS}


def _path(template: str) -> str:
    return template.replace("{id}", "x").replace("{name}", "app.js")  # a page file that exists


async def _closed_with(stream: WebSocketStream) -> int | None:
    with anyio.fail_after(5):
        while True:
            try:
                await stream.receive()
            except TransportClosed as closed:
                return closed.close_code


async def create_token(daemon: Daemon, role: str, name: str, **extra: Any) -> str:
    async with daemon.client() as admin:
        created = await admin.post("/tokens", json={"role": role, "name": name, **extra})
    assert created.status_code == 201, created.text
    token: str = created.json()["token"]
    return token


async def test_a_stranger_gets_401_on_every_route_but_health(daemon: Daemon) -> None:
    async with httpx.AsyncClient(base_url=daemon.http) as anyone:
        for route in ROUTES:
            method = "GET" if route.method == "WS" else route.method
            for headers in ({}, {"Authorization": "Bearer mesh_not-a-token"}):
                reply = await anyone.request(method, _path(route.path), headers=headers)
                if route.right is Right.PUBLIC:
                    assert reply.status_code == 200, route
                    continue
                assert reply.status_code == 401, (route, reply.text)
                assert reply.headers["www-authenticate"].startswith("Bearer"), route
                error = reply.json()["error"]
                if route.path.startswith("/mcp"):  # MCP clients show a JSON-RPC error (docs/mcp.md)
                    assert error["code"] == ErrorCode.UNAUTHORIZED, (route, error)
                    continue
                assert error["status"] == 401 and error["missing"] == "token", route
        for route in ROUTES:
            if route.method == "WS":
                url = daemon.ws.removesuffix("/ws") + _path(route.path)
                async with open_websocket(url) as stream:
                    assert await _closed_with(stream) == CloseCode.UNAUTHORIZED, route
        assert (await anyone.get("/nowhere")).status_code == 401  # no route map for strangers


async def test_each_role_gets_403_naming_the_right_it_lacks(daemon: Daemon) -> None:
    observer = await create_token(daemon, "observer", "eyes")
    client = await create_token(daemon, "client", "ci")
    async with daemon.client(token=observer) as eyes, daemon.client(token=client) as ci:
        for route in ROUTES:
            if route.method == "WS":
                continue
            for token_name, http, rights in (
                ("observer", eyes, OBSERVER_RIGHTS),
                ("client", ci, CLIENT_RIGHTS),
            ):
                reply = await http.request(route.method, _path(route.path))
                if route.right in rights:
                    assert reply.status_code not in (401, 403), (token_name, route)
                else:
                    assert reply.status_code == 403, (token_name, route, reply.text)
                    error = reply.json()["error"]
                    if route.path.startswith("/mcp"):  # a JSON-RPC error that names the right
                        assert error["code"] == ErrorCode.FORBIDDEN, (route, error)
                        assert str(route.right) in error["message"], error
                        continue
                    assert error["missing"] == str(route.right)
    async with open_websocket(daemon.ws, token=client) as stream:
        assert await _closed_with(stream) == CloseCode.FORBIDDEN  # /ws is for agents
    async with daemon.open_events("/agents/events", token=observer) as events:
        with anyio.fail_after(5):
            assert json.loads(await events.receive())["type"] == "snapshot"
    url = daemon.ws.removesuffix("/ws") + "/agents/events"  # browsers: ?token=
    async with open_websocket(url, token=observer, token_in_query=True) as events:
        with anyio.fail_after(5):
            assert json.loads(await events.receive())["type"] == "snapshot"


def _mesh(daemon: Daemon, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "mesh.cli", *args],
        capture_output=True,
        text=True,
        env=env or daemon.env(),
        timeout=30,
        check=False,
    )


async def test_tokens_are_managed_live_and_a_revoked_one_is_cut_off_within_a_second(
    daemon: Daemon, tmp_path: Path
) -> None:
    created = await anyio.to_thread.run_sync(
        _mesh, daemon, "token", "create", "--role", "observer", "--name", "dash"
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.splitlines()[0]
    listed = await anyio.to_thread.run_sync(_mesh, daemon, "token", "list")
    # The daemon is shared: other tests' tokens may be listed too.
    assert any("dash" in line and "observer" in line for line in listed.stdout.splitlines())
    assert token not in listed.stdout
    assert daemon.data_dir is not None
    assert token not in (Path(daemon.data_dir) / "tokens.json").read_text()
    async with daemon.open_events("/agents/events", token=token) as watcher:
        with anyio.fail_after(5):
            assert json.loads(await watcher.receive())["type"] == "snapshot"
        revoked = await anyio.to_thread.run_sync(_mesh, daemon, "token", "revoke", "dash")
        assert revoked.returncode == 0 and "revoked" in revoked.stdout
        with anyio.fail_after(1):
            assert await _closed_with(watcher) == CloseCode.UNAUTHORIZED
    async with daemon.client(token=token) as gone:
        assert (await gone.get("/agents")).status_code == 401
    no_token = {k: v for k, v in daemon.env().items() if k != "MESH_TOKEN"}
    no_token["MESH_DATA_DIR"] = str(tmp_path / "elsewhere")
    refused = await anyio.to_thread.run_sync(lambda: _mesh(daemon, "agents", env=no_token))
    assert refused.returncode == 8 and "no token was found" in refused.stderr
    observer = await anyio.to_thread.run_sync(
        lambda: _mesh(daemon, "call", "x", "y", env={**no_token, "MESH_TOKEN": token})
    )
    assert observer.returncode == 8


async def test_an_agent_token_from_the_store_dials_in_and_is_cut_off_when_revoked(
    daemon: Daemon,
) -> None:
    token = await create_token(daemon, "agent", "dialer-token", agent="dialer")
    command, _ = echo_agent_command()
    args = ["-m", "mesh.agents.echo", "--connect", daemon.ws, "--token-env", "T"]
    agent = await anyio.open_process(
        [command, *args, "--id", "dialer"], env={**os.environ, "T": token}
    )
    async with agent:
        await daemon.wait_online("dialer")
        async with daemon.client() as admin:
            assert (await admin.delete("/tokens/dialer-token")).status_code == 200
        with anyio.fail_after(10):
            code = await agent.wait()
    assert code == 3  # the agent was told 4001: retrying cannot help


def _tls_files(tmp_path: Path) -> tuple[str, str, str]:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key, bundle = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    issued.private_key_pem.write_to_path(str(key))
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    ca.cert_pem.write_to_path(str(bundle))
    return str(cert), str(key), str(bundle)


async def test_tls_on_the_daemon_port(tmp_path: Path) -> None:
    cert, key, ca = _tls_files(tmp_path)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "dialer.toml").write_text(DIAL_IN)
    tls = ["--tls-cert", cert, "--tls-key", key]
    env = {"DIALER_TOKEN": "dialer-secret"}
    async with spawn_daemon(manifests, extra_args=tls, env=env, ca=ca) as daemon:
        assert daemon.http.startswith("https://") and daemon.ws.startswith("wss://")
        command, _ = echo_agent_command()
        args = ["-m", "mesh.agents.echo", "--connect", daemon.ws, "--ca", ca, "--id", "dialer"]
        agent_env = {**os.environ, "DIALER_TOKEN": "dialer-secret"}
        async with await anyio.open_process(
            [command, *args, "--token-env", "DIALER_TOKEN"], env=agent_env
        ) as agent:
            await daemon.wait_online("dialer")
            async with daemon.client() as http:
                echoed = await http.post(
                    "/rpc",
                    json={
                        "agent": "dialer",
                        "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"message": "over tls"}},
                    },
                )
            assert echoed.json() == {"result": {"message": "over tls"}}
            listed = await anyio.to_thread.run_sync(_mesh, daemon, "agents")
            assert listed.returncode == 0 and "dialer" in listed.stdout, listed.stderr
            async with httpx.AsyncClient(base_url=daemon.http) as untrusting:
                with pytest.raises(httpx.ConnectError):
                    await untrusting.get("/health")
            agent.terminate()
