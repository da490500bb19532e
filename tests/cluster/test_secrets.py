"""NATS secrets stay out of every value a stranger (or a log) can read; an open NATS is refused.

A password in ``--nats nats://user:pw@host`` would be shown wherever the URL is:
``/health``, the connect log, error messages. So the URL carries no user-info at
all (secrets have no flag), a stranger's ``/health`` says status and counts only,
and a plaintext NATS at a network address is not joined without credentials.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from mesh import EMBEDDER
from mesh.cluster import ClusterError, ClusterSettings
from mesh.daemon import SettingsError, load_settings
from mesh.testing import spawn_daemon, spawn_nats_server
from tests.cluster._helpers import open_member

pytestmark = [pytest.mark.anyio]

SECRET = "hunter2-do-not-show"


async def test_user_info_in_the_nats_url_stops_mesh_serve_without_repeating_it(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-m", "mesh.cli", "serve", "--port", "0"]
    command += ["--manifests", str(tmp_path), "--data-dir", str(tmp_path / "data")]
    command += ["--nats", f"nats://svc:{SECRET}@127.0.0.1:4222"]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, check=False)
    assert done.returncode == 2
    said = done.stderr.decode()
    assert "carries credentials" in said and "MESH_NATS_PASSWORD" in said
    assert SECRET not in said and "svc" not in said
    assert "Traceback" not in said


@pytest.mark.parametrize("url", [f"nats://{SECRET}@127.0.0.1:4222", f"tls://u:{SECRET}@h:4222"])
def test_a_token_or_password_in_any_url_is_refused(url: str) -> None:
    with pytest.raises(ClusterError, match="carries credentials") as refused:
        ClusterSettings(nats=f"nats://127.0.0.1:4222,{url}", nats_user="u")
    assert SECRET not in str(refused.value)


def test_settings_reprs_hide_the_secrets() -> None:
    env = {"MESH_NATS": "nats://127.0.0.1:4222", "MESH_NATS_USER": "svc"}
    settings = load_settings(environ={**env, "MESH_NATS_PASSWORD": SECRET})
    assert SECRET not in repr(settings) and "nats_password='***'" not in repr(settings)
    assert "nats_password=***" in repr(settings)
    cluster = ClusterSettings(nats="nats://127.0.0.1:4222", nats_token=SECRET)
    assert SECRET not in repr(cluster) and SECRET not in str(cluster)


@pytest.mark.parametrize(
    ("values", "joins"),
    [
        ({"nats": "nats://10.0.0.8:4222"}, False),
        ({"nats": "nats://127.0.0.1:4222,nats://nats.example:4222"}, False),
        ({"nats": "nats://10.0.0.8:4222", "nats_allow_open": True}, True),
        ({"nats": "nats://10.0.0.8:4222", "nats_token": "t"}, True),
        ({"nats": "nats://10.0.0.8:4222", "nats_user": "u", "nats_password": "p"}, True),
        ({"nats": "tls://10.0.0.8:4222"}, True),
        ({"nats": "nats://localhost:4222,nats://[::1]:4222"}, True),
    ],
)
def test_plaintext_nats_on_a_network_needs_credentials_or_a_yes(
    values: dict[str, object], joins: bool
) -> None:
    if joins:
        load_settings(environ={}, overrides=values)
        return
    with pytest.raises(SettingsError, match="plaintext with no credentials") as refused:
        load_settings(environ={}, overrides=values)
    assert "nats_allow_open" in str(refused.value)


async def test_mesh_serve_flag_allows_an_open_nats_on_purpose(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "mesh.cli", "serve", "--port", "0"]
    command += ["--manifests", str(tmp_path), "--data-dir", str(tmp_path / "data")]
    command += ["--nats", "nats://192.0.2.1:4222", "--help"]
    with anyio.fail_after(60):
        done = await anyio.run_process(command, check=False)
    assert b"--nats-allow-open" in done.stdout
    command.remove("--help")
    with anyio.fail_after(60):
        refused = await anyio.run_process(command, check=False)
    assert refused.returncode == 2 and b"plaintext with no credentials" in refused.stderr


async def test_joining_logs_no_secret_and_warns_without_credentials() -> None:
    args = ["--user", "svc", "--pass", SECRET]
    async with spawn_nats_server(args=args) as nats:
        with capture_logs() as logs:
            async with open_member(nats.url, "a", nats_user="svc", nats_password=SECRET) as a:
                assert a.cluster.link.connected
                assert SECRET not in repr(a.cluster.describe())
        assert logs and SECRET not in repr(logs)
        assert not [e for e in logs if e["event"] == "cluster.nats_without_credentials"]
    async with spawn_nats_server() as nats:
        with capture_logs() as logs:
            async with open_member(nats.url, "b"):
                pass
        assert [e for e in logs if e["event"] == "cluster.nats_without_credentials"]


async def test_a_strangers_health_says_status_and_counts_only(tmp_path: Path) -> None:
    async with spawn_nats_server(args=["--user", "svc", "--pass", SECRET]) as nats:
        env = {"MESH_NATS_USER": "svc", "MESH_NATS_PASSWORD": SECRET}
        args = ["--nats", nats.url, "--daemon-id", "only"]
        (tmp_path / "manifests").mkdir()
        async with spawn_daemon(tmp_path / "manifests", env=env, extra_args=args) as daemon:
            async with daemon.client() as admin:
                full = (await admin.get("/health")).json()
            # NATS on loopback answers within the daemon's connect_timeout, before it listens.
            assert full["cluster"]["nats"]["connected"] is True
            async with httpx.AsyncClient(base_url=daemon.http) as stranger:
                response = await stranger.get("/health")
            shown = response.json()
            assert response.status_code == 200 and shown["status"] == "ok"
            assert shown["cluster"] == {
                "connected": True,
                "daemons": 1,
                "remote_agents": 0,
                "rooms": 0,
            }
            assert daemon.http.split("//")[1] not in response.text
            assert "nats" not in shown["cluster"] and "127.0.0.1" not in response.text
            # A token that may read sees the layout: URLs of daemons, NATS, rooms.
            assert list(full["cluster"]["daemons"]) == ["only"]
            assert "server" in full["cluster"]["nats"]
            assert SECRET not in repr(full) and SECRET not in response.text


#: The example config this repository ships (docs/cluster.md#an-example-nats-server).
EXAMPLE_CONFIG = Path(__file__).resolve().parents[2] / "examples" / "nats" / "mesh-daemons.conf"


async def test_daemons_work_on_the_example_nats_config_and_a_stranger_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    from mesh import AgentSpec, local_connector
    from mesh.agents.echo import agent as echo_agent
    from tests.cluster._helpers import wait_status

    monkeypatch.setenv("MESH_DAEMON_A_PASSWORD", "pw-a")
    monkeypatch.setenv("MESH_DAEMON_B_PASSWORD", "pw-b")
    echo = AgentSpec("echo", local_connector(echo_agent))
    async with spawn_nats_server(args=["-c", str(EXAMPLE_CONFIG)]) as nats:
        a_creds = {"nats_user": "daemon-a", "nats_password": "pw-a", "data_dir": tmp_path}
        b_creds = {"nats_user": "daemon-b", "nats_password": "pw-b", "data_dir": tmp_path}
        async with (
            open_member(nats.url, "a", [echo], **a_creds),  # type: ignore[arg-type]
            open_member(nats.url, "b", **b_creds) as b,  # type: ignore[arg-type]
        ):
            await wait_status(b.mesh.registry, "echo")
            assert await b.mesh.call_tool(
                "echo", "echo", {"message": "hi"}, on_behalf_of=EMBEDDER
            ) == {"message": "hi"}
        # A client without credentials (the daemon's own nats-py client) is not let in.
        with pytest.raises(ClusterError, match="refused"):
            async with open_member(nats.url, "c", connect_timeout=1.5):
                pass

    assert not [line for line in nats.log if b"Violation" in line and b"daemon-" in line]
