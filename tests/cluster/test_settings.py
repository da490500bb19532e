"""Cluster settings: flags, variables and the file; names on NATS; credentials refused or taken."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from mesh.cluster import ClusterError, ClusterSettings
from mesh.cluster._settings import Names, agent_key, key_agent
from mesh.daemon import SettingsError, load_settings
from mesh.testing import NatsServer, spawn_nats_server
from tests.cluster._helpers import open_member


def test_flags_and_variables_reach_the_cluster_settings(tmp_path: Path) -> None:
    from mesh.daemon._settings import cluster_settings

    config = tmp_path / "mesh.toml"
    config.write_text('nats = "nats://file:4222"\nnats_user = "svc"\nroom_lease_ttl = 4\n')
    env = {"MESH_NATS_PASSWORD": "pw", "MESH_CLUSTER_ID": "prod"}
    settings = load_settings(config, environ=env, overrides={"daemon_id": "d1"})
    cluster = cluster_settings(settings)
    assert (cluster.nats, cluster.cluster_id, cluster.daemon_id) == (
        "nats://file:4222",
        "prod",
        "d1",
    )
    assert cluster.room_lease_ttl == 4.0
    assert cluster.connect_options() == {"user": "svc", "password": "pw"}
    assert load_settings(environ={}).nats == ""  # alone by default: nothing to install


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"cluster_id": "has space"}, "cluster_id 'has space'"),
        ({"daemon_id": "a.b"}, "daemon_id 'a.b'"),
        ({"room_lease_ttl": 0.5}, "room_lease_ttl must be at least 1 s"),
        ({"nats_tls_cert": "c.pem"}, "nats_tls_cert and nats_tls_key go together"),
        # What the CLI fuzz found: a terminal escape as --nats was a traceback.
        ({"nats": "\x1b[2J"}, "is not a URL (Invalid IPv6 URL)"),
        ({"nats": "nats://127.0.0.1:port"}, "is not a URL (Port could not be cast"),
    ],
)
def test_bad_cluster_settings_are_refused_at_load(values: dict[str, object], says: str) -> None:
    with pytest.raises(SettingsError, match="invalid cluster settings") as refused:
        load_settings(environ={"MESH_NATS": "nats://127.0.0.1:4222"}, overrides=values)
    assert says in str(refused.value)


def test_credentials_files_are_checked_before_dialling(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="nats_creds: no file"):
        ClusterSettings(nats="nats://x", nats_creds=str(tmp_path / "none.creds")).connect_options()
    with pytest.raises(ClusterError, match="cannot load the NATS TLS files"):
        ClusterSettings(nats="nats://x", nats_tls_ca=str(tmp_path / "ca.pem")).connect_options()
    assert ClusterSettings(nats="nats://x", nats_token="t").connect_options() == {"token": "t"}
    with pytest.raises(ClusterError, match="needs a URL"):
        ClusterSettings(nats=" ")


@pytest.mark.parametrize("agent_id", ["echo", "a.b-c_d", "Has Space", "ünï", "x.", ".y", "*>"])
def test_any_agent_id_is_a_key_and_back(agent_id: str) -> None:
    key = agent_key("d-1", agent_id)
    assert key.startswith("agent.d-1.")  # the holder first: NATS grants agent.<daemon>.>
    assert key_agent(key) == ("d-1", agent_id)
    body = key.removeprefix("agent.d-1.")
    assert all(c.isascii() and (c.isalnum() or c in "-_=.") for c in body), key


@pytest.mark.parametrize("key", ["agent.echo", "agent..x", "agent.d.=!!", "agent.d*.x"])
def test_a_key_that_is_no_agent_key_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="not an agent key"):
        key_agent(key)


def test_names_keep_two_meshes_apart() -> None:
    one, two = Names("one", "d"), Names("two", "d")
    assert one.agents_bucket != two.agents_bucket and one.calls() != two.calls()
    assert one.calls("e") == "mesh.one.call.e" and one.room_subject("r.1") == "mesh.one.rooms.r.1"
    assert one.room_of(one.room_subject("r.1")) == "r.1"


@pytest.mark.anyio
async def test_user_and_password_join_and_a_wrong_one_is_refused() -> None:
    async with spawn_nats_server(args=["--user", "svc", "--pass", "right"]) as nats:
        async with open_member(nats.url, "a", nats_user="svc", nats_password="right") as a:
            assert a.cluster.link.connected
        with pytest.raises(ClusterError, match="refused this daemon's credentials"):
            async with open_member(
                nats.url, "b", nats_user="svc", nats_password="wrong", connect_timeout=1.5
            ):
                pass


@pytest.mark.anyio
async def test_a_token_joins(nats_with_token: NatsServer) -> None:
    async with open_member(nats_with_token.url, "a", nats_token="s3cret") as a:
        assert a.cluster.describe()["nats"]["connected"] is True


@pytest.fixture
async def nats_with_token() -> NatsServer:  # type: ignore[misc]
    async with spawn_nats_server(args=["--auth", "s3cret"]) as server:
        yield server


@pytest.mark.anyio
async def test_mesh_serve_says_when_nats_refuses_it(
    nats_with_token: NatsServer, tmp_path: Path
) -> None:
    command = [sys.executable, "-m", "mesh.cli", "serve", "--port", "0"]
    command += ["--manifests", str(tmp_path), "--data-dir", str(tmp_path / "data")]
    command += ["--nats", nats_with_token.url, "--log-level", "error"]
    env = {**os.environ, "MESH_NATS_TOKEN": "wrong"}
    with anyio.fail_after(60):
        done = await anyio.run_process(command, env=env, check=False)
    assert done.returncode == 2
    assert b"refused this daemon's credentials" in done.stderr
    assert b"Traceback" not in done.stderr


@pytest.mark.anyio
async def test_a_daemon_nats_refuses_starts_no_agent(
    nats_with_token: NatsServer, tmp_path: Path
) -> None:
    """NATS is asked before any agent is spawned: a daemon that cannot join started nothing."""
    manifests, marker = tmp_path / "manifests", tmp_path / "spawned"
    manifests.mkdir()
    (manifests / "would-start.toml").write_text(
        'id = "would-start"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
        f'args = ["-c", "open({str(marker)!r}, \'w\')"]\n'
    )
    command = [sys.executable, "-m", "mesh.cli", "serve", "--port", "0"]
    command += ["--manifests", str(manifests), "--data-dir", str(tmp_path / "data")]
    command += ["--nats", nats_with_token.url, "--log-level", "error"]
    env = {**os.environ, "MESH_NATS_TOKEN": "wrong"}
    with anyio.fail_after(60):
        done = await anyio.run_process(command, env=env, check=False)
    assert done.returncode == 2
    said = done.stderr.decode().strip().splitlines()
    assert (
        len(said) == 1 and "NATS at" in said[0] and "refused this daemon's credentials" in said[0]
    )
    assert not marker.exists()


def _other_value(name: str, default: object) -> object:
    """A value for the setting ``name`` that is not its default and that the cluster takes."""
    if name == "nats":
        return "nats://127.0.0.1:4222"
    if isinstance(default, bool):
        return not default
    if isinstance(default, float):
        return default + 1.0
    return f"{name}-value"  # a string or an unset path, cluster and daemon ids included


def test_each_nats_setting_is_declared_once_and_reaches_the_cluster() -> None:
    """The daemon and the cluster share one declaration: a knob added to it is a daemon
    setting, has its variable, and arrives in the cluster's settings with no other edit."""
    from mesh._nats_settings import NatsSettings, variable_of
    from mesh.daemon import DaemonSettings
    from mesh.daemon._settings import ENV_SETTINGS, cluster_settings

    assert issubclass(DaemonSettings, NatsSettings) and issubclass(ClusterSettings, NatsSettings)
    knobs = NatsSettings.__struct_fields__
    defaults = msgspec.structs.asdict(NatsSettings())
    environ = {variable_of(name): str(_other_value(name, defaults[name])) for name in knobs}
    assert set(environ) <= set(ENV_SETTINGS)
    cluster = cluster_settings(load_settings(environ=environ))
    for name in knobs:
        assert getattr(cluster, name) == _other_value(name, defaults[name]), name
    shown = repr(cluster) + repr(load_settings(environ=environ))
    assert "nats_token-value" not in shown and "nats_password-value" not in shown
    assert "nats_user='nats_user-value'" in shown
