"""Mounting an MCP server that needs OAuth: the SDK's own authorization server on loopback
(metadata discovery, dynamic client registration, PKCE, refresh), `mesh mcp login` once,
then the daemon's mount on its own.

One server per backend serves both tests that log in: each registers a client of its own
and is granted tokens of its own, and what one test makes the server forget (the access
tokens issued so far) the other's login, made afresh, does not need.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest

from mesh import EMBEDDER, ManifestError, MeshOrchestrator, load_manifest
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.integration._daemon import serve_in_process
from tests.mcp._peers import ROOT, spawn_oauth_server
from tests.mcp.test_mount import wait_mounted

pytestmark = pytest.mark.anyio

_URL = re.compile(rb"(http://127\.0\.0\.1:\d+/authorize\?\S+)")


@pytest.fixture(scope="module")
async def oauth_server(anyio_backend: str) -> AsyncIterator[str]:
    """The MCP server and its authorization server, once per backend: its MCP URL."""
    async with spawn_oauth_server() as url:
        yield url


def guarded_manifest(directory: Path, url: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / "guarded.toml").write_text(
        f"""id = "guarded"
[transport]
type = "http"
endpoint = "{url}"
protocol = "mcp"
[transport.oauth]
"""
    )


async def mesh_mcp_login(manifests: Path, data: Path, environ: dict[str, str]) -> None:
    """`mesh mcp login guarded`, with this test as the person at the browser."""
    command = [sys.executable, "-m", "mesh.cli", "mcp", "login", "guarded", "--no-browser"]
    command += ["--manifests", str(manifests), "--data-dir", str(data)]
    async with await anyio.open_process(command, env=environ) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(30):
            while not (found := _URL.search(seen)):
                seen += await process.stderr.receive()
            async with httpx.AsyncClient(follow_redirects=True) as browser:
                answer = await browser.get(found.group(1).decode())
            assert answer.status_code == 200 and "authorized" in answer.text
            assert await process.wait() == 0, seen


async def test_a_server_that_needs_oauth_mounts_after_one_login(
    tmp_path: Path, oauth_server: str
) -> None:
    manifests, data = tmp_path / "manifests", tmp_path / "data"
    environ = {**os.environ, "MESH_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    url = oauth_server
    guarded_manifest(manifests, url)
    # Before the login the link says what to do, and nobody is asked to log in.
    async with MeshOrchestrator.from_manifests(
        manifests, environ=environ, connect_timeout=10
    ) as mesh:
        assert mesh.agents() == []
        error = mesh.link_error("guarded") or ""
        assert "needs OAuth" in error and "mesh mcp login guarded" in error, error

    await mesh_mcp_login(manifests, data, environ)
    grant = data / "mcp-oauth" / "guarded.json"
    assert stat.S_IMODE(grant.stat().st_mode) == 0o600
    issued = msgspec.json.decode(grant.read_bytes())
    assert issued["refresh_token"] and issued["client_id"]  # registered by the mesh

    async with MeshOrchestrator.from_manifests(manifests, environ=environ) as mesh:
        await wait_mounted(mesh)
        whoami = await mesh.call_tool("guarded", "whoami", on_behalf_of=EMBEDDER)
        assert whoami == {"result": "authorized"}
        # The server forgets its access tokens: the next call is refused (401) once,
        # the mount refreshes, keeps the new grant, and the call goes through.
        async with httpx.AsyncClient() as client:
            await client.post(url.removesuffix("/mcp") + "/expire")
        whoami = await mesh.call_tool("guarded", "whoami", on_behalf_of=EMBEDDER)
        assert whoami == {"result": "authorized"}
    renewed = msgspec.json.decode(grant.read_bytes())
    assert renewed["access_token"] != issued["access_token"]
    assert stat.S_IMODE(grant.stat().st_mode) == 0o600


def test_a_manifest_with_oauth_is_checked(tmp_path: Path) -> None:
    base = 'id = "x"\n[transport]\ntype = "http"\nendpoint = "http://127.0.0.1:9/mcp"\n'
    bad = tmp_path / "x.toml"
    bad.write_text(base + "[transport.oauth]\n")  # protocol "mesh"
    with pytest.raises(ManifestError, match=r"protocol = \"mcp\".*\$\.transport\.oauth"):
        load_manifest(bad)
    bad.write_text(base + 'protocol = "mcp"\ntoken_env = "T"\n[transport.oauth]\n')
    with pytest.raises(ManifestError, match=r"`token_env` or `oauth`, not both"):
        load_manifest(bad)
    bad.write_text(base + 'protocol = "mcp"\n[transport.oauth]\nclient_secret_env = "s3cr3t!"\n')
    with pytest.raises(ManifestError, match=r"NAME of an environment variable"):
        load_manifest(bad)
    bad.write_text(base + 'protocol = "mcp"\n[transport.oauth]\ngrant = "implicit"\n')
    with pytest.raises(ManifestError, match=r"grant"):
        load_manifest(bad)


def test_the_oauth_client_settings_are_checked(tmp_path: Path) -> None:
    """A client metadata URL, a JWT key and its algorithm: each refusal names its field
    and rule; a relative key file is the manifest's neighbour."""
    base = (
        'id = "x"\n[transport]\ntype = "http"\nendpoint = "http://127.0.0.1:9/mcp"\n'
        'protocol = "mcp"\n[transport.oauth]\n'
    )
    path = tmp_path / "x.toml"
    refused = {
        'client_metadata_url = "http://app.example/client.json"\n': r"https://.*client_metadata",
        'client_metadata_url = "https://app.example/"\n': r"needs a path",
        'grant = "client_credentials"\nclient_id = "c"\n'
        'client_metadata_url = "https://app.example/c.json"\n': r"authorization_code",
        'jwt_key_file = "key.pem"\n': r"Needs `client_id`.*jwt_key_file",
        'client_id = "c"\njwt_key_file = "key.pem"\nclient_secret_env = "S"\n': r"not both",
        'client_id = "c"\njwt_key_file = "key.pem"\njwt_algorithm = "HS256"\n': r"jwt_algorithm",
    }
    for text, rule in refused.items():
        path.write_text(base + text)
        with pytest.raises(ManifestError, match=rule):
            load_manifest(path)
    path.write_text(
        base + 'grant = "client_credentials"\nclient_id = "c"\njwt_key_file = "k.pem"\n'
    )
    oauth = load_manifest(path).transport.oauth  # type: ignore[union-attr]
    assert oauth is not None and oauth.jwt_key_file == str(tmp_path / "k.pem")
    assert oauth.jwt_algorithm == "ES256"


def test_mesh_mcp_login_refuses_an_agent_without_oauth(tmp_path: Path) -> None:
    (tmp_path / "plain.toml").write_text(
        'id = "plain"\n[transport]\ntype = "http"\nendpoint = "http://127.0.0.1:9/mcp"\n'
        'protocol = "mcp"\n'
    )
    command = [sys.executable, "-m", "mesh.cli", "mcp", "login", "plain"]
    done = subprocess.run(
        [*command, "--manifests", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and "has no [transport.oauth]" in done.stderr, done.stderr
    done = subprocess.run(
        [*command[:-1], "ghost", "--manifests", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "no manifest" in done.stderr, done.stderr


async def test_mesh_serve_finds_the_grant_in_its_own_data_dir(
    tmp_path: Path, oauth_server: str
) -> None:
    """`mesh mcp login --data-dir DIR`, then `mesh serve --data-dir DIR` with no
    `MESH_DATA_DIR` in its environment: the daemon's mount uses the grant kept there."""
    manifests, data = tmp_path / "manifests", tmp_path / "data"
    login_environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    login_environ.pop("MESH_DATA_DIR", None)
    guarded_manifest(manifests, oauth_server)
    await mesh_mcp_login(manifests, data, login_environ)
    async with serve_in_process(manifests, data) as daemon:
        await daemon.wait_online("guarded", timeout=30)
        body = {"agent": "guarded", "method": "tools/call", "params": {"name": "whoami"}}
        async with daemon.client() as http:
            answer = await http.post("/rpc", json=body)
        assert answer.status_code == 200, answer.text
        assert "authorized" in answer.text
