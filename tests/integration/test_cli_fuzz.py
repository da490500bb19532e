"""Whatever a user types, the ``mesh`` command answers in one line with a documented exit code.

Hypothesis draws commands, flags (found by walking the real parser, so a new flag is
fuzzed the day it is added), values, ``MESH_*`` variables and manifests, and runs
``mesh.cli.main`` in this process: the same code a console script runs, minus the
interpreter's start. A few cases run as real ``mesh`` processes, where the process is
the point (what reaches the terminal, the exit status a shell sees).

Nothing here can reach a daemon: every URL is malformed or a closed loopback port,
and ``mesh serve`` is always pointed at a manifests directory that does not exist
(so it stops after checking its settings, before it would listen).
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import chdir, contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mesh.cli import main
from mesh.cli._codes import (
    EXIT_BROKEN_PIPE,
    EXIT_CANNOT_LISTEN,
    EXIT_DENIED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_ROOM_HALTED,
    EXIT_SHUTTING_DOWN,
    EXIT_TIMEOUT,
    EXIT_UNAVAILABLE,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from mesh.cli._main import build_parser
from tests._cli_logging import logging_of_its_own

DOCUMENTED = {
    EXIT_OK,
    EXIT_FAILED,
    EXIT_USAGE,
    EXIT_UNREACHABLE,
    EXIT_UNAVAILABLE,
    EXIT_TIMEOUT,
    EXIT_CANNOT_LISTEN,
    EXIT_ROOM_HALTED,
    EXIT_DENIED,
    EXIT_SHUTTING_DOWN,
    EXIT_INTERRUPTED,
    EXIT_BROKEN_PIPE,
}
MESH = [sys.executable, "-m", "mesh.cli"]

#: Commands that own stdin (an MCP host's frames, a person's lines): run as processes below.
STDIN_COMMANDS = {("mcp",), ("room", "join")}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


CLOSED = f"http://127.0.0.1:{_closed_port()}"  # nothing listens: the socket is gone
ABSENT = "/nonexistent/mesh-fuzz"

#: Values a user might type where any value goes: empty, signs, overflows, non-numbers,
#: half-JSON, paths that are not there, control and non-ASCII characters.
NASTY = st.sampled_from(
    [
        "",
        "0",
        "-1",
        "1",
        "0.0001",
        "99999",
        "1e309",
        "nan",
        "inf",
        "-inf",
        "abc",
        "x=1",
        "=",
        "{",
        "[]",
        '{"a": 1}',
        "null",
        ABSENT,
        ".",
        "..",
        "héllo",
        "\x1b[2J",
        "a" * 300,
        "--",
        "-h-",
    ]
)
URLS = st.sampled_from(
    [
        CLOSED,
        "abc",
        "http://",
        "http://[::1",
        "ftp://127.0.0.1:1",
        "ws://127.0.0.1:1",
        ":80",
        f"http://{'a' * 64}:1",  # a DNS label is 63 characters at most
        "http://a..b:1",
    ]
)
ENV = st.dictionaries(
    st.sampled_from(
        [
            "MESH_PORT",
            "MESH_HOST",
            "MESH_URL",
            "MESH_TOKEN",
            "MESH_TOKEN_FILE",
            "MESH_CA",
            "MESH_BACKEND",
            "MESH_DATA_DIR",
            "MESH_LOG_LEVEL",
            "MESH_LOG_FORMAT",
            "MESH_DRAIN_TIMEOUT",
            "MESH_NATS",
            "MESH_ROOM_LEASE_TTL",
            "MESH_DAEMON_ID",
        ]
    ),
    NASTY | URLS,
    max_size=3,
)


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[Any]:
    """(command path, its parser) for every leaf command of ``mesh``."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        yield path, parser
        return
    for name, sub in actions[0].choices.items():
        yield from _commands(sub, (*path, name))


COMMANDS = [(p, sub) for p, sub in _commands(build_parser()) if p not in STDIN_COMMANDS]


@st.composite
def argvs(draw: st.DrawFn) -> list[str]:
    path, parser = draw(st.sampled_from(COMMANDS))
    argv = list(path)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        if action.option_strings and draw(st.integers(0, 3)) != 0:
            continue  # each flag in about one case in four
        if action.dest == "interactive":
            continue  # a prompt reads stdin
        values = st.sampled_from(list(action.choices)) if action.choices else NASTY
        if action.dest == "url":
            values = URLS
        if action.dest == "agent" and path == ("dev",):
            values = st.sampled_from(["mesh.agents.echo", "absent.py", "absent_module", ABSENT])
        value = draw(values | NASTY)
        if action.option_strings:
            flag = draw(st.sampled_from(action.option_strings))
            takes_value = action.nargs != 0
            argv += [flag, value] if takes_value else [flag]
        elif draw(st.integers(0, 9)) > 0:  # now and then a positional goes missing
            argv.append(value)
    if path == ("serve",):
        argv += ["--manifests", ABSENT]  # it never listens
    return argv


@contextmanager
def _environment(env: dict[str, str], cwd: Path) -> Iterator[None]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    with mock.patch.dict(os.environ, {**clean, "MESH_URL": CLOSED, **env}, clear=True), chdir(cwd):
        yield


def run_in_process(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """``mesh ARGV``: its exit status and everything it wrote; fails on any traceback."""
    out, err = io.StringIO(), io.StringIO()
    with _environment(env, cwd), logging_of_its_own(), redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse (usage, --help, --version) and _fail
            code = exit_.code if isinstance(exit_.code, int) else EXIT_FAILED
        # Anything else escaping main() is the traceback a user would see: the test fails.
    written = out.getvalue() + err.getvalue()
    return code, written


def assert_clean(argv: list[str], code: int, written: str) -> None:
    assert code in DOCUMENTED, (argv, code, written)
    assert "Traceback" not in written, (argv, written)
    assert "Exception Group" not in written, (argv, written)


@pytest.mark.timeout(300)  # ~20 s here; a loaded machine must not cut an example short
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(argv=argvs(), env=ENV)
@example(argv=["dev", ""], env={})  # found by this test: importlib's "Empty module name"
@example(argv=["dev", "."], env={})
@example(argv=["agents", "--url", "http://a..b:1"], env={})  # the resolver: UnicodeError
@example(argv=["serve", "--port", "99999", "--manifests", ABSENT], env={})
@example(argv=["agents", "--url", "http://[::1"], env={})
def test_no_flag_or_variable_gets_a_traceback(
    argv: list[str], env: dict[str, str], tmp_path: Path
) -> None:
    code, written = run_in_process(argv, env, tmp_path)
    assert_clean(argv, code, written)


FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "id": st.sampled_from(['"fz"', '""', '"bad id!"', "3", '"' + "a" * 80 + '"']),
        "timeout": st.sampled_from(["0", "-1", "nan", "1e309", '"x"', "2"]),
        "heartbeat_interval": st.sampled_from(["0", "-1", "0.1", "nan", '"5"']),
        "capabilities": st.sampled_from(['["chat"]', '"chat"', "[1]", "[]"]),
        "max_frame_size": st.sampled_from(["0", "-5", "1", "1e309", "99999999999999999999"]),
    },
)
TRANSPORT = st.fixed_dictionaries(
    {"type": st.sampled_from(['"stdio"', '"http"', '"websocket"', '"dial-in"', '"carrier"', "1"])},
    optional={
        "command": st.sampled_from(['"pyhton"', '""', f'"{ABSENT}"', "[]", '"/"']),
        "args": st.sampled_from(['["-m"]', '"x"', "[1]", "[]"]),
        "cwd": st.sampled_from([f'"{ABSENT}"', '""', '"."', "3"]),
        "env": st.sampled_from(['{"A" = "1"}', '{"A" = 1}', '"x"', "{}"]),
        "url": st.sampled_from(
            [f'"{CLOSED}/rpc"', '"ws://127.0.0.1:1/ws"', '"abc"', '""', '"http://[::1"']
        ),
        "protocol": st.sampled_from(['"mcp"', '"mesh"', '"a2a?"']),
    },
)


def manifest_text(fields: dict[str, str], transport: dict[str, str]) -> str:
    top = "".join(f"{key} = {value}\n" for key, value in fields.items())
    section = "".join(f"{key} = {value}\n" for key, value in transport.items())
    return f"{top}\n[transport]\n{section}"


@pytest.mark.timeout(300)
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(fields=FIELDS, transport=TRANSPORT, command=st.sampled_from(["validate", "dev"]))
def test_no_manifest_gets_a_traceback(
    fields: dict[str, str], transport: dict[str, str], command: str, tmp_path: Path
) -> None:
    directory = tmp_path / "manifests"
    directory.mkdir(exist_ok=True)
    (directory / "fz.toml").write_text(manifest_text(fields, transport))
    argv = ["validate", str(directory)] if command == "validate" else ["dev", "manifests/fz.toml"]
    argv += ["--timeout", "5"] if command == "dev" else []
    code, written = run_in_process(argv, {}, tmp_path)
    assert_clean(argv, code, written)
    if command == "dev":
        assert code != EXIT_OK or "fz" in written, written  # an agent that answered


# -- as real processes ------------------------------------------------------------------


def mesh(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MESH_")}
    done = subprocess.run(
        [*MESH, *args],
        cwd=cwd,
        env={**clean, "MESH_URL": CLOSED, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout, done.stderr


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


ECHO = 'id = "{id}"\n[transport]\ntype = "stdio"\ncommand = "{command}"\n{extra}'
ECHO += 'args = ["-m", "mesh.agents.echo", "--stdio"]\n'


@pytest.mark.parametrize(
    ("command", "extra", "quoted"),
    [("pyhton", "", "'pyhton'"), ("python", f'cwd = "{ABSENT}"\n', ABSENT)],
    ids=["misspelt-command", "missing-cwd"],
)
def test_mesh_dev_on_a_manifest_that_cannot_start_is_one_line_exit_4(
    tmp_path: Path, command: str, extra: str, quoted: str
) -> None:
    (tmp_path / "x.toml").write_text(ECHO.format(id="x", command=command, extra=extra))
    code, _, err = mesh("dev", "x.toml", cwd=tmp_path)
    assert code == EXIT_UNAVAILABLE, err
    line = one_line(err)
    assert "cannot" in line and quoted in line and "'x'" in line, line


def test_serve_on_a_port_past_65535_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    code, _, err = mesh("serve", "--port", "99999", cwd=tmp_path)
    assert code == EXIT_USAGE
    assert "port" in one_line(err)


def test_a_deadline_of_zero_is_a_usage_error_and_a_timeout_is_one_line(tmp_path: Path) -> None:
    code, _, err = mesh(
        "dev", "mesh.agents.echo", "--call", "sleep", "--timeout", "0", cwd=tmp_path
    )
    assert code == EXIT_USAGE and "above 0" in err and "Traceback" not in err
    call = ["--call", "sleep", "--arg", "seconds=30", "--timeout", "0.5"]
    code, _, err = mesh("dev", "mesh.agents.echo", *call, cwd=tmp_path)
    assert code == EXIT_TIMEOUT
    assert one_line(err).startswith("error: CallTimeout -32001: no response within 0.5 s")


def test_serve_in_an_empty_directory_says_what_to_do(tmp_path: Path) -> None:
    code, _, err = mesh("serve", cwd=tmp_path)
    assert code == EXIT_USAGE
    line = one_line(err)
    assert "no manifests directory" in line and "--manifests" in line and "create it" in line


def test_version_is_the_installed_distributions(tmp_path: Path) -> None:
    from importlib.metadata import version

    code, out, _ = mesh("--version", cwd=tmp_path)
    assert (code, out.strip()) == (EXIT_OK, f"mesh {version('agent-mesh')}")


def test_an_unreachable_daemon_names_the_url_flag_and_variable(tmp_path: Path) -> None:
    for args in (["agents"], ["call", "echo", "echo"], ["room", "list"], ["mcp"]):
        code, _, err = mesh(*args, cwd=tmp_path)
        assert code == EXIT_UNREACHABLE, (args, err)
        line = one_line(err)
        assert CLOSED in line and "--url" in line and "$MESH_URL" in line, (args, line)


def test_room_join_with_no_daemon_is_one_line(tmp_path: Path) -> None:
    code, _, err = mesh("room", "join", "r", "--as", "ann", cwd=tmp_path)
    assert code == EXIT_UNREACHABLE, err
    one_line(err)


def test_room_run_help_names_both_limits_and_their_defaults(tmp_path: Path) -> None:
    code, out, _ = mesh("room", "run", "--help", cwd=tmp_path)
    assert code == EXIT_OK
    flat = " ".join(out.split())
    assert "--max-turns N messages in a chat, rounds in a review (default 40 and 3)" in flat
    assert "--max-messages-per-agent N each member speaks at most N times (default 20)" in flat
