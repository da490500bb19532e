"""Every ```python block in README.md and docs/ runs, so the examples cannot rot; so does
every shell recipe fenced ```sh runs, as written (its fixed ports moved to free ones).

Blocks meant as fragments use another fence (```py, ```text, ```sh).
"""

from __future__ import annotations

import json
import os
import re
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


@pytest.mark.parametrize(("where", "code"), _examples(), ids=[w for w, _ in _examples()])
def test_example_runs(where: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 0, f"{where} failed:\n{result.stdout}\n{result.stderr}"


# -- recipes that start processes ----------------------------------------------------------

#: A shell recipe the docs promise runs as written: fenced ```sh runs.
RECIPE = re.compile(r"^```sh runs\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: The commands in a recipe that keep running (each "in a terminal of its own").
SERVERS = ("mesh serve ", "nats-server ")
#: A fixed port in a recipe (--port 8701, -p 4222, :8703): each becomes a free one here, so
#: the recipe cannot meet another program on this machine.
PORT = re.compile(r"(?<=--port )\d{4,5}\b|(?<=-p )\d{4,5}\b|(?<=127\.0\.0\.1:)\d{4,5}\b")


def _recipes() -> list[tuple[str, str]]:
    found = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        for n, match in enumerate(RECIPE.finditer(path.read_text()), start=1):
            found.append((f"{path.relative_to(ROOT)}#recipe{n}", match.group(1)))
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _split(recipe: str) -> tuple[str, list[str], str]:
    """Setup (before the first server), the servers, and the commands after them."""
    ports: dict[str, str] = {}
    recipe = PORT.sub(lambda m: ports.setdefault(m.group(), str(_free_port())), recipe)
    lines = [line for line in recipe.splitlines() if not line.startswith("pip install ")]
    first = next(i for i, line in enumerate(lines) if line.startswith(SERVERS))
    last = max(i for i, line in enumerate(lines) if line.startswith(SERVERS))
    servers = [line.split("#")[0] for line in lines[first : last + 1] if line.startswith(SERVERS)]
    return "\n".join(lines[:first]), servers, "\n".join(lines[last + 1 :])


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


async def _wait_online(url: str, token: str, ids: set[str]) -> None:
    from transports import open_websocket

    ws = "ws" + url.removeprefix("http") + "/agents/events"
    online: set[str] = set()
    async with open_websocket(ws, token=token) as events:
        while not ids <= online:
            event = json.loads(await events.receive())
            for agent in event["agents"] if event["type"] == "snapshot" else [event["agent"]]:
                (online.add if agent["status"] == "online" else online.discard)(agent["id"])


def _everyone_online(directory: Path, servers: list[str]) -> None:
    """Every daemon sees every agent of every manifest online (watching, no polling)."""
    ids = {tomllib.loads(path.read_text())["id"] for path in directory.glob("*/*.toml")}
    for command in servers:
        if not command.startswith("mesh serve"):
            continue
        words = shlex.split(command)
        port, data = words[words.index("--port") + 1], words[words.index("--data-dir") + 1]
        token = (directory / data / "admin.token").read_text().strip()
        anyio.run(_wait_online, f"http://127.0.0.1:{port}", token, ids)


@pytest.mark.parametrize(("where", "recipe"), _recipes(), ids=[w for w, _ in _recipes()])
def test_recipe_runs_as_written(where: str, recipe: str, tmp_path: Path) -> None:
    setup, servers, commands = _split(recipe)
    # The recipe's own `mesh`, `python` and `nats-server`: this environment's.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if not k.startswith("MESH_")}
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
