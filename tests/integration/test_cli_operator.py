"""An operator's first week with the ``mesh`` command: tokens that never reach a terminal,
token files that work as written, names that mean one token, exit codes scripts can trust,
and mistakes answered with the command's own usage and what was likely meant."""

from __future__ import annotations

import os
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
import sniffio

from mesh import MeshError
from mesh.cli._codes import EXIT_DENIED, EXIT_FAILED, EXIT_SHUTTING_DOWN, EXIT_USAGE
from mesh.testing import Daemon, EchoServer, open_daemon_client, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.faults._helpers import HOLDING_AGENT, stop_and_kill, wait_holding

pytestmark = pytest.mark.anyio

MESH = [sys.executable, "-m", "mesh.cli"]

ECHO = """
id = "echo"
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio", "--id", "echo"]
"""

#: What a wrong ``--token-file`` (a system password file) holds: every line a secret.
PASSWORDS = "root:x:0:0:hunter2-root:/root:/bin/bash\nbin:x:1:1:hunter2-bin:/bin:/sbin/nologin\n"


@pytest.fixture(scope="module")
async def echo_daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    manifests = tmp_path_factory.mktemp("cli-operator")
    (manifests / "echo.toml").write_text(ECHO)
    async with spawn_daemon(manifests) as daemon:
        await daemon.wait_online("echo")
        yield daemon


async def run(*args: str, env: dict[str, str], cwd: Path | None = None) -> tuple[int, str, str]:
    with anyio.fail_after(60):
        done = await anyio.run_process([*MESH, *args], env=env, check=False, cwd=cwd)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def unique(name: str) -> str:
    """A token name no other test (nor the other backend's run) has taken."""
    return f"{name}-{secrets.token_hex(3)}"


# -- tokens ---------------------------------------------------------------------------------


async def test_a_malformed_token_is_named_never_shown_and_exits_8(
    echo_daemon: Daemon, tmp_path: Path
) -> None:
    passwords = tmp_path / "passwd"
    passwords.write_text(PASSWORDS)
    code, out, err = await run("agents", "--token-file", str(passwords), env=echo_daemon.env())
    assert code == EXIT_DENIED, err
    assert "hunter2" not in err + out
    assert err.strip().splitlines() == [
        f"mesh: the token from --token-file {str(passwords)!r} is malformed: 2 lines, where a "
        "token is one (its value is not shown)"
    ]
    spaced = "mesh_secret-part one-more"
    code, out, err = await run("agents", env=echo_daemon.env(MESH_TOKEN=spaced))
    assert code == EXIT_DENIED, err
    assert "secret-part" not in err
    assert "$MESH_TOKEN is malformed: whitespace inside it" in err


async def test_surrounding_whitespace_is_not_part_of_the_token(
    echo_daemon: Daemon, tmp_path: Path
) -> None:
    padded = tmp_path / "token"
    padded.write_text(f"  {echo_daemon.token}\n\n")
    code, out, err = await run("agents", "--token-file", str(padded), env=echo_daemon.env())
    assert (code, err) == (0, "")
    assert "echo" in out
    code, out, err = await run("agents", env=echo_daemon.env(MESH_TOKEN=f"{echo_daemon.token}\n"))
    assert (code, err) == (0, "")


async def test_the_daemon_client_strips_a_token_and_never_shows_a_malformed_one(
    echo_daemon: Daemon,
) -> None:
    async with open_daemon_client(echo_daemon.http, token=f" {echo_daemon.token}\n") as client:
        assert [agent["id"] for agent in await client.agents()] == ["echo"]
    with pytest.raises(MeshError, match="malformed: 2 lines") as raised:
        async with open_daemon_client(echo_daemon.http, token=PASSWORDS.replace("\n", "\r\n")):
            pass
    assert "hunter2" not in str(raised.value)


async def test_token_create_into_a_file_writes_a_token_file_that_works(
    echo_daemon: Daemon, tmp_path: Path
) -> None:
    """The docs' Prometheus recipe: ``mesh token create ... > file``."""
    name = unique("prometheus")
    create = ["token", "create", "--role", "observer", "--name", name]
    code, out, err = await run(*create, env=echo_daemon.env())
    assert code == 0, err
    assert out.count("\n") == 1 and out.startswith("mesh_"), "the token alone on stdout"
    assert "shown once, keep it" in err and name in err
    token_file = tmp_path / "mesh.token"
    token_file.write_text(out)
    code, _, err = await run("agents", "--token-file", str(token_file), env=echo_daemon.env())
    assert (code, err) == (0, "")
    scraper = {"Authorization": f"Bearer {out.strip()}"}
    async with httpx.AsyncClient(base_url=echo_daemon.http, headers=scraper) as prometheus:
        metrics = await prometheus.get("/metrics")
    assert metrics.status_code == 200


async def test_a_token_name_in_use_is_refused_with_409_and_one_line(echo_daemon: Daemon) -> None:
    name = unique("ci")
    create = ["token", "create", "--role", "client", "--name", name]
    code, _, err = await run(*create, env=echo_daemon.env())
    assert code == 0, err
    code, out, err = await run(*create, env=echo_daemon.env())
    assert (code, out) == (EXIT_FAILED, "")
    assert err.startswith(f"mesh: a token named {name!r} exists (id ")
    assert "token names are unique" in err
    async with echo_daemon.client() as admin:
        again = await admin.post("/tokens", json={"role": "admin", "name": name})
        assert again.status_code == 409
        assert again.json()["error"]["rule"] == "unique token names"
        named = [t for t in (await admin.get("/tokens")).json()["tokens"] if t["name"] == name]
    assert len(named) == 1, "the refused requests issued nothing"
    code, out, err = await run("token", "revoke", name, env=echo_daemon.env())
    assert code == 0, err
    code, _, err = await run(*create, env=echo_daemon.env())
    assert code == 0, "a revoked token's name is free again: " + err


# -- exit codes -----------------------------------------------------------------------------


async def test_a_deadline_over_max_call_timeout_is_a_usage_error_naming_it(
    echo_daemon: Daemon,
) -> None:
    call = ["call", "echo", "echo", "--arg", "message=hi", "--timeout", "1e9"]
    code, out, err = await run(*call, env=echo_daemon.env())
    assert (code, out) == (EXIT_USAGE, ""), err
    assert "max_call_timeout" in err


async def hold(http: httpx.AsyncClient) -> None:
    """A call the holding agent keeps for ten minutes."""
    body = {
        "agent": "holder",
        "method": "tools/call",
        "params": {"name": "hold", "arguments": {"seconds": 600}},
        "timeout": 120,
    }
    await http.post("/rpc", json=body)


async def test_a_call_refused_during_a_drain_exits_9(tmp_path: Path) -> None:
    (tmp_path / "holder.toml").write_text(
        'id = "holder"\n[transport]\ntype = "dial-in"\ntoken_env = "HOLD_TOKEN"\n'
    )
    env = {"HOLD_TOKEN": "hold-token-for-operator-tests"}
    async with spawn_daemon(tmp_path, env=env, extra_args=["--drain-timeout", "30"]) as daemon:
        command = [sys.executable, "-m", HOLDING_AGENT, "--connect", daemon.ws, "--id", "holder"]
        command += ["--token-env", "HOLD_TOKEN", "--backend", sniffio.current_async_library()]
        agent = await anyio.open_process(command, env={**os.environ, **env}, stderr=None)
        try:
            await daemon.wait_online("holder")
            async with anyio.create_task_group() as tg, daemon.client(timeout=60) as http:
                tg.start_soon(hold, http)  # keeps the daemon draining
                with anyio.fail_after(20):
                    await wait_holding(EchoServer("", "", agent, None), 1)
                daemon.process.send_signal(signal.SIGTERM)
                with anyio.fail_after(20):  # one request after another, until it drains
                    while (await http.get("/readyz")).status_code != 503:
                        pass
                code, _, err = await run("ping", "holder", env=daemon.env())
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                stop_and_kill(agent.pid)
                await agent.aclose()
    assert code == EXIT_SHUTTING_DOWN, err
    assert "shutting down" in err


async def test_a_misspelt_flag_gets_the_commands_usage_and_a_suggestion() -> None:
    code, out, err = await run("serve", "--prot", "9000", env=dict(os.environ))
    assert (code, out) == (EXIT_USAGE, "")
    assert err.startswith("usage: mesh serve ")
    assert err.strip().endswith("unrecognized arguments: --prot 9000 (did you mean --port?)")
    code, _, err = await run("token", "list", "--jsno", env=dict(os.environ))
    assert code == EXIT_USAGE
    assert err.startswith("usage: mesh token list ")
    assert "(did you mean --json?)" in err


async def test_a_settings_file_key_that_is_not_one_gets_did_you_mean(tmp_path: Path) -> None:
    settings = tmp_path / "mesh.toml"
    settings.write_text("prot = 9000\n")
    serve = ["serve", "--config", str(settings), "--manifests", str(tmp_path)]
    code, out, err = await run(*serve, "--data-dir", str(tmp_path / "data"), env=dict(os.environ))
    assert (code, out) == (EXIT_USAGE, "")
    assert err.strip() == f"mesh: {settings}: unknown setting 'prot'; did you mean 'port'?"


async def test_validate_takes_one_manifest_file(tmp_path: Path) -> None:
    manifest = tmp_path / "echo.toml"
    manifest.write_text(ECHO)
    code, out, err = await run("validate", str(manifest), env=dict(os.environ))
    assert code == 0, err
    assert out.startswith(f"ok  {manifest}  echo  stdio")
    assert "Not a directory" not in err


async def test_validate_shows_the_protocol_a_link_speaks(tmp_path: Path) -> None:
    (tmp_path / "files.toml").write_text(
        'id = "files"\n[transport]\ntype = "stdio"\nprotocol = "mcp"\ncommand = "python"\n'
        'args = ["-m", "some.mcp.server"]\n'
    )
    code, out, err = await run("validate", str(tmp_path), env=dict(os.environ))
    assert code == 0, err
    assert out.startswith(f"ok  {tmp_path / 'files.toml'}  files  stdio (mcp)  ")


async def test_agents_shows_the_protocol_a_link_speaks(tmp_path: Path) -> None:
    """`mesh agents` (and `/agents`) show what a configured link speaks, connected or not."""
    (tmp_path / "files.toml").write_text(
        'id = "files"\n[transport]\ntype = "stdio"\nprotocol = "mcp"\ncommand = "python"\n'
        'args = ["-m", "some.mcp.server"]\n'
    )
    async with spawn_daemon(tmp_path) as daemon:
        async with daemon.client() as http:
            listed = (await http.get("/agents")).json()["agents"]
        assert [(a["id"], a["transport"], a["protocol"]) for a in listed] == [
            ("files", "stdio", "mcp")
        ]
        code, out, err = await run("agents", env=daemon.env())
    assert code == 0, err
    row = out.splitlines()[1].split()
    assert row[:3] == ["files", "stdio", "(mcp)"], out


# -- mesh dev: the author's own errors --------------------------------------------------------


async def test_dev_shows_a_syntax_error_as_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def greet(:\n    pass\n")
    code, out, err = await run("dev", "broken.py", env=dict(os.environ), cwd=tmp_path)
    assert (code, out) == (EXIT_USAGE, "")
    assert err.splitlines() == ["broken.py:1:11: SyntaxError: invalid syntax"]


async def test_dev_shows_only_the_authors_frames_of_an_import_error(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("def setup():\n    raise RuntimeError('no config')\n")
    (tmp_path / "crashing.py").write_text("import helper\n\nhelper.setup()\n")
    code, _, err = await run("dev", "crashing.py", env=dict(os.environ), cwd=tmp_path)
    assert code == EXIT_USAGE
    assert "RuntimeError: no config" in err
    frames = [line.strip() for line in err.splitlines() if line.strip().startswith("File ")]
    assert len(frames) == 2, err
    assert "crashing.py" in frames[0] and "helper.py" in frames[1]
