"""``MeshOrchestrator.from_manifests``: a directory of manifests, the good linked, the bad named."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from mesh import EMBEDDER, ManifestError, MeshOrchestrator

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

#: Starting a Python child on a loaded 2-core machine; bounds the whole test.
GUARD = 30.0


def echo_manifest(agent_id: str) -> str:
    # PYTHONPATH: the child runs this tree's echo agent (a stdio child inherits no environment).
    return f"""
id = "{agent_id}"
capabilities = ["echo"]
[transport]
type = "stdio"
command = {json.dumps(sys.executable)}
args = ["-m", "mesh.agents.echo", "--stdio", "--id", "{agent_id}"]
env = {{ PYTHONPATH = {json.dumps(str(ROOT))} }}
"""


BROKEN = 'id = "broken"\nheartbeat_interval = "often"\n[transport]\ntype = "stdio"\ncommand = "x"\n'
NO_TOKEN = """
id = "far"
[transport]
type = "websocket"
endpoint = "ws://127.0.0.1:1/ws"
token_env = "MESH_TEST_UNSET_TOKEN"
"""
DIAL_IN = 'id = "caller"\n[transport]\ntype = "dial-in"\ntoken_env = "MESH_TEST_DIAL_IN"\n'


async def test_the_good_manifests_link_and_the_broken_are_named(tmp_path: Path) -> None:
    (tmp_path / "echo.toml").write_text(echo_manifest("echo-stdio"))
    (tmp_path / "broken.toml").write_text(BROKEN)
    (tmp_path / "far.toml").write_text(NO_TOKEN)
    (tmp_path / "caller.toml").write_text(DIAL_IN)
    environ = {"MESH_TEST_DIAL_IN": "a-dial-in-token"}
    with capture_logs() as logs:
        mesh = MeshOrchestrator.from_manifests(tmp_path, environ=environ)
    events = {entry["event"] for entry in logs}
    assert {"mesh.manifest_invalid", "mesh.manifest_unusable"} <= events
    assert all(isinstance(error, ManifestError) for error in mesh.manifest_errors)
    described = sorted(str(error) for error in mesh.manifest_errors)
    assert len(described) == 2
    assert "broken.toml" in described[0] and "$.heartbeat_interval" in described[0]
    assert "far.toml" in described[1] and "MESH_TEST_UNSET_TOKEN" in described[1]
    assert mesh.dial_in_tokens.identify("a-dial-in-token") == "caller"
    # "far" cannot connect, but it is configured: it is listed, offline, with the reason.
    assert mesh.linked_agents() == ["caller", "echo-stdio", "far"]

    with anyio.fail_after(GUARD):
        async with mesh:
            reply = await mesh.call_tool(
                "echo-stdio", "echo", {"message": "from a manifest"}, on_behalf_of=EMBEDDER
            )
            assert reply == {"message": "from a manifest"}
            assert [record.id for record in mesh.agents()] == ["echo-stdio"]
            far = mesh.view("far")
            assert far is not None and far.status == "offline" and not far.registered
            assert far.link_error is not None and "MESH_TEST_UNSET_TOKEN" in far.link_error
            caller = mesh.view("caller")
            assert caller is not None and caller.status == "waiting for dial-in"


async def test_an_unset_dial_in_token_is_named(tmp_path: Path) -> None:
    (tmp_path / "caller.toml").write_text(DIAL_IN)
    with capture_logs() as logs:
        mesh = MeshOrchestrator.from_manifests(tmp_path, environ={})
    assert [entry["event"] for entry in logs] == ["mesh.token_missing"]
    assert len(mesh.manifest_errors) == 1
    assert "MESH_TEST_DIAL_IN" in str(mesh.manifest_errors[0])
