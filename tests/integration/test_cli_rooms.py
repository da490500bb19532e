"""The `mesh` CLI against a real `mesh serve`: every room command, its exit codes, and
output that is data (what agents wrote cannot drive the terminal; JSON stays exact)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh.rooms import MessageEvent, StoppedEvent, decode_event
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)

from ._daemon import LONG_LIMITS

pytestmark = pytest.mark.anyio

#: An escape sequence, an OSC window title ended by BEL, a C1 CSI and a bidi override.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9b31mred\u202eok\tdone"
SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07\\x9b31mred\\u202eok\tdone"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def persona_manifest(directory: Path, agent_id: str, script: list[str], delay: float) -> None:
    (directory / f"{agent_id}.toml").write_text(
        f'''id = "{agent_id}"
name = "{agent_id.title()}"
capabilities = ["chat", "\\u001b]0;caps\\u0007"]

[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.persona", "--manifest", "{directory / agent_id}.toml", "--stdio"]

[persona]
system_prompt = "You are {agent_id}."

[persona.provider]
provider = "scripted"
script = {json.dumps(script)}
delay = {delay}
'''
    )


def echo_manifest(directory: Path) -> None:
    (directory / "echo.toml").write_text(
        'id = "echo"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
        'args = ["-m", "mesh.agents.echo", "--stdio"]\n'
    )


async def mesh(daemon: Daemon, *args: str) -> tuple[int, str, str]:
    """Run ``mesh ARGS`` against the daemon (with its token): exit code, stdout, stderr."""
    command = [sys.executable, "-m", "mesh.cli", *args]
    done = await anyio.run_process(command, env=daemon.env(), check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def wait_for_event(daemon: Daemon, room_id: str, until: Callable[[Any], bool]) -> None:
    with anyio.fail_after(60):
        async with daemon.open_events(f"/rooms/{room_id}/events") as watch:
            while not until(decode_event(await watch.receive())):
                pass


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """One daemon for the tests that each run rooms of their own ids and read the newest
    room, never the whole list: a daemon and its persona processes are most of what each of
    them would cost. Alice and Bob say what a terminal must not run, a turn in 0.3 s, so a
    long room runs long enough to be paused and a short one still ends in seconds."""
    manifests = tmp_path_factory.mktemp("cli-rooms-manifests")
    persona_manifest(manifests, "alice", [HOSTILE, "Tea."], 0.3)
    persona_manifest(manifests, "bob", ["Coffee.", f"Bob says {HOSTILE}"], 0.3)
    echo_manifest(manifests)
    data = ["--data-dir", str(tmp_path_factory.mktemp("cli-rooms-data"))]
    async with spawn_daemon(manifests, extra_args=data) as shared:
        await shared.wait_online("alice", "bob", "echo")
        yield shared


def assert_escaped(text: str) -> None:
    assert not [c for c in RAW if c in text], repr(text)


async def test_what_agents_wrote_reaches_the_terminal_as_text(daemon: Daemon) -> None:
    room = ["--topic", f"topic {HOSTILE}", "--agent", "alice", "--agent", "bob"]
    code, out, err = await mesh(daemon, "room", "run", *room, "--id", "r1", "--max-turns", "4")
    assert code == 0, err
    assert_escaped(out + err)
    assert f"  {SHOWN}" in out and f"Bob says {SHOWN}" in out

    code, out, err = await mesh(daemon, "room", "show", "r1")
    assert code == 0, err
    assert_escaped(out)
    assert f"topic {SHOWN}" in out and f"  {SHOWN}" in out

    code, out, _ = await mesh(daemon, "room", "export", "r1", "--format", "md")
    assert code == 0
    assert_escaped(out)
    assert f"# topic {SHOWN}" in out

    # JSON stays exact: the same value, with the controls as \u escapes.
    code, out, _ = await mesh(daemon, "room", "export", "r1", "--format", "jsonl")
    assert code == 0
    assert_escaped(out)
    events = [json.loads(line) for line in out.splitlines()]
    assert next(e["text"] for e in events if e["type"] == "MESSAGE") == HOSTILE
    code, out, _ = await mesh(daemon, "room", "list", "--json")
    assert code == 0
    assert_escaped(out)
    assert json.loads(out)["rooms"][0]["room"]["topic"] == f"topic {HOSTILE}"

    code, out, err = await mesh(daemon, "call", "echo", "echo", "--arg", f"message={HOSTILE}")
    assert code == 0, err
    assert_escaped(out)
    assert json.loads(out) == {"message": HOSTILE}
    code, out, err = await mesh(daemon, "call", "echo", "fail", "--arg", f"message={HOSTILE}")
    assert code == 1
    assert_escaped(err)
    assert SHOWN in err
    assert "ToolError -32000 (raised RuntimeError): " in err  # as `mesh dev` shows it
    code, out, err = await mesh(daemon, "call", "echo", "sleep", "--arg", "secs=1")
    assert code == 1 and "InvalidParams -32602" in err and "did you mean `seconds`" in err

    code, out, _ = await mesh(daemon, "agents")
    assert code == 0
    assert_escaped(out)
    assert "\\x1b]0;caps\\x07,chat" in out  # sorted
    code, out, _ = await mesh(daemon, "agents", "--json")
    assert code == 0
    assert "\\u001b]0;caps\\u0007" in out
    assert "\x1b]0;caps\x07" in [c for a in json.loads(out) for c in a["capabilities"]]


# Some thirty `mesh` processes: a minute on a loaded 2-core machine, several at load 20.
@pytest.mark.timeout(600)
async def test_every_room_command_and_its_exit_codes(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    # Half a second a turn: the short room still ends in about a second; the long one runs
    # 400 turns, so it outlasts the CLI processes that pause and stop it at any load.
    persona_manifest(manifests, "alice", ["Tea.", "Tea again."], 0.5)
    persona_manifest(manifests, "bob", ["Coffee.", "Coffee again."], 0.5)
    echo_manifest(manifests)
    data = ["--data-dir", str(tmp_path / "data")]
    async with spawn_daemon(manifests, extra_args=data) as daemon:
        await daemon.wait_online("alice", "bob", "echo")
        code, out, _ = await mesh(daemon, "room", "list")
        assert (code, out.split()) == (0, ["ID", "STATUS", "TURN", "MEMBERS", "TOPIC"])

        # A short room, watched from its first event to its stop.
        short = ["--topic", "Short", "--agent", "alice", "--agent", "bob", "--max-turns", "2"]
        assert (await mesh(daemon, "room", "run", *short, "--id", "short"))[0] == 0
        code, out, err = await mesh(daemon, "room", "watch", "short")
        assert code == 0, err
        assert out.count("), turn ") == 2 and "stopped: MAX_TURNS" in err
        exported = (await mesh(daemon, "room", "export", "short", "--format", "jsonl"))[1]
        first = next(e for e in map(json.loads, exported.splitlines()) if e["type"] == "MESSAGE")
        code, out, err = await mesh(daemon, "room", "watch", "short", "--since", str(first["seq"]))
        assert code == 0 and "turn 1:" not in out and "turn 2:" in out, err

        # A long room, steered while it runs.
        long = {"id": "long", "topic": "Long", "members": ["alice", "bob"], "limits": LONG_LIMITS}
        async with daemon.client() as http:
            assert (await http.post("/rooms", json=long)).status_code == 201
        await wait_for_event(daemon, "long", lambda e: isinstance(e, MessageEvent))
        code, out, err = await mesh(daemon, "room", "pause", "long")
        assert (code, out.strip()) == (0, "room long: paused (PAUSED: paused on request)"), err
        code, out, err = await mesh(daemon, "room", "resume", "long")
        assert (code, out.strip()) == (0, "room long: running"), err
        code, out, err = await mesh(daemon, "room", "stop", "long")
        assert code == 0 and out.startswith("room long: stopped (STOPPED"), err
        await wait_for_event(daemon, "long", lambda e: isinstance(e, StoppedEvent))
        code, _, err = await mesh(daemon, "room", "resume", "long")
        assert code == 1 and "cannot be resumed" in err

        code, out, _ = await mesh(daemon, "room", "list")
        assert code == 0
        rows = [line.split() for line in out.splitlines()[1:]]
        assert [row[:2] for row in rows] == [
            ["long", "stopped"],
            ["short", "stopped"],
        ]  # newest first
        assert rows[1][2:] == ["(MAX_TURNS)", "2", "alice,bob", "Short"]

        # Unknown rooms are "unknown" (4) for every command; bad flags are usage (2).
        for command in ("show", "watch", "pause", "resume", "stop", "delete", "export"):
            code, _, err = await mesh(daemon, "room", command, "nope")
            assert code == 4, (command, err)
            assert "nope" in err
        assert (await mesh(daemon, "room", "watch"))[0] == 2

        code, out, err = await mesh(daemon, "room", "delete", "short")
        assert (code, out.strip()) == (0, "room short deleted"), err
        assert (await mesh(daemon, "room", "show", "short"))[0] == 4
        assert (await mesh(daemon, "room", "list"))[1].count("short") == 0

        code, out, err = await mesh(daemon, "tools", "echo")
        assert code == 0, err
        assert "echo  Return the message unchanged" in out
        assert out.count("message  str") >= 1
        code, out, err = await mesh(daemon, "tools", "echo", "--json")
        assert code == 0 and {t["name"] for t in json.loads(out)} >= {"echo", "sleep", "relay"}
        assert (await mesh(daemon, "tools", "nobody"))[0] == 4

    code, _, err = await mesh(daemon, "room", "list")
    assert code == 3 and "cannot reach the daemon" in err


async def test_watch_and_export_keep_a_room_that_was_paused_and_resumed(daemon: Daemon) -> None:
    async with daemon.client() as http:
        spec: dict[str, object] = {"id": "long", "topic": "Long", "members": ["alice", "bob"]}
        spec["limits"] = LONG_LIMITS
        assert (await http.post("/rooms", json=spec)).status_code == 201
        await wait_for_event(daemon, "long", lambda e: isinstance(e, MessageEvent))
        assert (await http.post("/rooms/long/pause")).status_code == 200
        assert (await http.post("/rooms/long/resume")).status_code == 200
        # Watching follows the room past the old pause, until it really stops.
        async with anyio.create_task_group() as tg:
            watched: list[tuple[int, str, str]] = []

            async def watch() -> None:
                watched.append(await mesh(daemon, "room", "watch", "long"))

            tg.start_soon(watch)
            await wait_for_event(
                daemon, "long", lambda e: isinstance(e, MessageEvent) and e.turn > 2
            )
            assert (await http.post("/rooms/long/stop")).status_code == 200
    [(code, out, err)] = watched
    assert code == 7 and "room long stopped: STOPPED" in err, err
    assert "room long stopped: PAUSED" not in err
    assert "stopped after turn" in out and "resumed at turn" in out
    code, out, err = await mesh(daemon, "room", "export", "long")
    assert code == 0, err
    assert ": paused after turn" in out and "(paused on request)*" in out
    assert ": resumed at turn" in out and "STOPPED" in out


async def test_watch_follow_goes_on_through_a_pause_until_the_room_stops(daemon: Daemon) -> None:
    async with daemon.client() as http:
        spec: dict[str, object] = {"id": "tea", "topic": "Tea", "members": ["alice", "bob"]}
        spec["limits"] = LONG_LIMITS
        assert (await http.post("/rooms", json=spec)).status_code == 201
        await wait_for_event(daemon, "tea", lambda e: isinstance(e, MessageEvent))
        assert (await http.post("/rooms/tea/pause")).status_code == 200
        command = [sys.executable, "-m", "mesh.cli", "room", "watch", "tea", "--follow"]
        watcher = await anyio.open_process(command, env=daemon.env())
        try:
            assert watcher.stdout is not None and watcher.stderr is not None
            printed = b""
            with anyio.fail_after(20):  # it has shown the pause, and watches on
                while b"paused after turn" not in printed:
                    printed += await watcher.stdout.receive()
            assert watcher.returncode is None, "a pause does not end following"
            assert (await http.post("/rooms/tea/resume")).status_code == 200
            await wait_for_event(
                daemon, "tea", lambda e: isinstance(e, MessageEvent) and e.turn > 2
            )
            assert (await http.post("/rooms/tea/stop")).status_code == 200
            with anyio.fail_after(60):
                code = await watcher.wait()
            said = (await watcher.stderr.receive()).decode()
        finally:
            with anyio.CancelScope(shield=True):
                if watcher.returncode is None:
                    watcher.kill()
                await watcher.aclose()
    assert code == 7 and "room tea stopped: STOPPED" in said, said


async def test_room_run_paused_creates_a_room_that_waits_to_be_resumed(daemon: Daemon) -> None:
    room = ["--topic", "Tea?", "--agent", "alice", "--agent", "bob", "--max-turns", "4"]
    code, _, err = await mesh(daemon, "room", "run", *room, "--id", "waits", "--paused")
    assert code == 0, err
    assert "room waits is paused before its first turn" in err
    assert "mesh room join waits --as NAME" in err and "mesh room resume waits" in err
    code, out, err = await mesh(daemon, "room", "list")
    assert code == 0, err
    assert out.splitlines()[1].split()[:3] == ["waits", "paused", "(PAUSED)"]
    assert out.splitlines()[1].split()[3] == "0"
    code, out, err = await mesh(daemon, "room", "resume", "waits")
    assert code == 0, err
    code, out, err = await mesh(daemon, "room", "watch", "waits", "--follow")
    assert code == 0 and "room waits stopped: MAX_TURNS" in err, err
    assert f"Bob says {SHOWN}" in out  # the fourth turn: every turn was taken
