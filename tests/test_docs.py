"""Every ```python block in README.md and docs/ runs, so the examples cannot rot; so does
every shell recipe fenced ```sh runs, as written (its fixed ports moved to free ones, a
``mesh serve`` with no port given one, and its clients pointed there with ``MESH_URL``).
A comment line right after a command that starts with ``# {`` is that command's output
(JSON), checked with ``...`` matching anything.

A python block runs as ``python example.py`` would run it, in its own directory, but in
this process: a new interpreter would spend a second (two under coverage) importing what
this one holds already. A block that is a program (it reads its command line or runs
under ``__main__``) or sets what a process has one of (its environment, its signal
handlers, the tracer provider) runs as a child, exactly so.

Blocks meant as fragments use another fence (```py, ```text, ```sh).
"""

from __future__ import annotations

import json
import os
import re
import runpy
import shlex
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
import pytest

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _examples() -> list[tuple[str, str]]:
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, match in enumerate(FENCE.finditer(path.read_text()), start=1):
            found.append((f"{path.relative_to(ROOT)}#{n}", match.group(1)))
    return found


#: What only a process of its own may do: be a program (run under ``__main__``, read its
#: command line, exit), or set what a process has one of and keeps (its environment and
#: import path, signal handlers, OpenTelemetry's tracer provider, logging's set-up).
OWN_PROCESS = re.compile(
    r"__main__|sys\.(argv|exit|path)|os\.environ|\bsignal\b|set_tracer_provider|logging"
)


@pytest.mark.parametrize(("where", "code"), _examples(), ids=[w for w, _ in _examples()])
def test_example_runs(
    where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "example.py"
    script.write_text(code)
    if OWN_PROCESS.search(code):
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
        )
        assert result.returncode == 0, f"{where} failed:\n{result.stdout}\n{result.stderr}"
        return
    # As `python example.py` in its directory: the working directory, and first on the path.
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    runpy.run_path(str(script), run_name="__main__")


def test_only_programs_and_process_wide_settings_get_a_process_of_their_own() -> None:
    own = [code for _, code in _examples() if OWN_PROCESS.search(code)]
    assert any("run_agent(agent)" in code for code in own)  # a program, under __main__
    assert any("set_tracer_provider" in code for code in own)  # one per process, for good
    assert len(own) < len(_examples()) / 4, own  # the rest share this process


# -- recipes that start processes ----------------------------------------------------------

#: A shell recipe the docs promise runs as written: fenced ```sh runs.
RECIPE = re.compile(r"^```sh runs\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: The commands in a recipe that keep running (each "in a terminal of its own").
SERVERS = re.compile(r"^(mesh serve|nats-server)\b")
#: A fixed port in a recipe (--port 8701, -p 4222, :8703): each becomes a free one here, so
#: the recipe cannot meet another program on this machine.
PORT = re.compile(r"(?<=--port )\d{4,5}\b|(?<=-p )\d{4,5}\b|(?<=127\.0\.0\.1:)\d{4,5}\b")
#: A block of the same page that names its file on its first line (``# greeter.py``): the
#: page's recipes find it in their directory, as a reader who saved it would.
NAMED_FILE = re.compile(r"^```\w+\n# ([\w/.-]+\.(?:py|toml))\n.*?^```", re.DOTALL | re.MULTILINE)
#: A command's expected output: a comment line right after it holding JSON.
EXPECTED = re.compile(r"^# (\{.*)$")
#: Printed after each command that has an expected output, to cut stdout into answers.
MARK = "@@recipe-output@@"


def _recipes() -> list[tuple[str, str, dict[str, str]]]:
    found = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text()
        files = {match.group(1): match.group(0) for match in NAMED_FILE.finditer(text)}
        files = {name: _body(block) for name, block in files.items()}
        for n, match in enumerate(RECIPE.finditer(text), start=1):
            found.append((f"{path.relative_to(ROOT)}#recipe{n}", match.group(1), files))
    return found


def _body(block: str) -> str:
    """A fenced block's text without its fences."""
    return block.split("\n", 1)[1].rsplit("```", 1)[0]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _split(recipe: str) -> tuple[str, list[str], str]:
    """Setup (before the first server), the servers, and the commands after them."""
    ports: dict[str, str] = {}
    recipe = PORT.sub(lambda m: ports.setdefault(m.group(), str(_free_port())), recipe)
    lines = [line for line in recipe.splitlines() if not line.startswith("pip install ")]
    at = [i for i, line in enumerate(lines) if SERVERS.match(line)]
    if not at:  # commands only (mesh dev, say)
        return "", [], "\n".join(lines)
    first, last = at[0], at[-1]
    servers = [
        line.split("#")[0].strip() for line in lines[first : last + 1] if SERVERS.match(line)
    ]
    return "\n".join(lines[:first]), servers, "\n".join(lines[last + 1 :])


def _with_port(command: str) -> str:
    """A ``mesh serve`` that names no port gets a free one (the recipe's clients follow it)."""
    if command.startswith("mesh serve") and "--port" not in command.split():
        return f"{command} --port {_free_port()}"
    return command


def _marked(commands: str) -> tuple[str, list[str]]:
    """The commands with a mark printed after each one whose output the recipe shows, and
    those outputs."""
    out: list[str] = []
    expected: list[str] = []
    for line in commands.splitlines():
        match = EXPECTED.match(line)
        if match:
            expected.append(match.group(1))
            out.append(f"printf '\\n{MARK}\\n'")
        else:
            out.append(line)
    return "\n".join(out), expected


def _check_outputs(stdout: str, expected: list[str], where: str) -> None:
    answers = stdout.split(f"\n{MARK}\n")
    for shown, answer in zip(expected, answers, strict=False):
        if "..." not in shown:  # JSON, however it is laid out
            assert json.loads(answer) == json.loads(shown), f"{where}: printed\n{answer}"
            continue
        last = answer.strip().splitlines()[-1] if answer.strip() else ""
        pattern = ".*".join(re.escape(part) for part in shown.split("..."))
        assert re.fullmatch(pattern, last), (
            f"{where}: printed\n{last}\nwhere the doc shows\n{shown}"
        )
    assert len(answers) == len(expected) + 1, f"{where}: stdout\n{stdout}"


def _ready(process: subprocess.Popen[bytes], command: str) -> None:
    """Until the server says it is up: mesh serve's JSON announcement, nats-server's log line."""
    if command.startswith("mesh serve"):
        assert process.stdout is not None
        assert b'"listening"' in process.stdout.readline(), command
        return
    assert process.stderr is not None
    for line in process.stderr:  # ends if the server exits
        if b"Server is ready" in line:
            return
    raise AssertionError(f"{command!r} exited before it was ready")


def _settled(agent: dict[str, object]) -> bool:
    """Online, or failed to connect at least once (a recipe's agent whose server it never
    starts, to show that refusal)."""
    return agent["status"] == "online" or bool(agent.get("link_error"))


async def _wait_online(url: str, token: str, ids: set[str]) -> None:
    from transports import open_websocket

    ws = "ws" + url.removeprefix("http") + "/agents/events"
    settled: set[str] = set()
    async with open_websocket(ws, token=token) as events:
        while not ids <= settled:
            event = json.loads(await events.receive())
            for agent in event["agents"] if event["type"] == "snapshot" else [event["agent"]]:
                (settled.add if _settled(agent) else settled.discard)(agent["id"])


def _everyone_online(directory: Path, servers: list[str]) -> None:
    """Every daemon sees every agent of every manifest online (watching, no polling)."""
    ids = {tomllib.loads(path.read_text())["id"] for path in directory.glob("*/*.toml")}
    for command in servers:
        if not command.startswith("mesh serve"):
            continue
        words = shlex.split(command)
        data = words[words.index("--data-dir") + 1] if "--data-dir" in words else ".mesh"
        port = words[words.index("--port") + 1]
        token = (directory / data / "admin.token").read_text().strip()
        anyio.run(_wait_online, f"http://127.0.0.1:{port}", token, ids)


@pytest.mark.parametrize(("where", "recipe", "files"), _recipes(), ids=[w for w, *_ in _recipes()])
def test_recipe_runs_as_written(
    where: str, recipe: str, files: dict[str, str], tmp_path: Path
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    setup, servers, commands = _split(recipe)
    servers = [_with_port(command) for command in servers]
    commands, expected = _marked(commands)
    # The recipe's own `mesh`, `python` and `nats-server`: this environment's.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if not k.startswith("MESH_")}
    first = shlex.split(servers[0]) if servers and servers[0].startswith("mesh serve") else []
    if first and "--port" in first:  # the clients' default daemon: the recipe's first
        env["MESH_URL"] = f"http://127.0.0.1:{first[first.index('--port') + 1]}"
    bash = ["bash", "-euo", "pipefail", "-c"]
    done = subprocess.run([*bash, setup], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, f"{where} setup failed: {done.stderr.decode()}"
    started: list[subprocess.Popen[bytes]] = []
    try:
        for command in servers:
            process = subprocess.Popen(
                [*bash, f"exec {command}"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if command.startswith("nats-server") else subprocess.DEVNULL,
            )
            started.append(process)
            _ready(process, command)
        _everyone_online(tmp_path, servers)
        done = subprocess.run(
            [*bash, commands], cwd=tmp_path, env=env, capture_output=True, timeout=120
        )
        assert done.returncode == 0, (
            f"{where} failed:\n{done.stdout.decode()}{done.stderr.decode()}"
        )
        _check_outputs(done.stdout.decode(), expected, where)
    finally:
        for process in reversed(started):
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
