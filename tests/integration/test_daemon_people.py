"""People and streamed replies through the real daemon: the page, its routes, and the terminal."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import httpx
import pytest

from mesh.rooms import DeltaEvent, MessageEvent, decode_live_event
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)

from ._daemon import persona_manifest

pytestmark = pytest.mark.anyio

ECHO = ["{speaker} said: {last}"]
GUARD = 60.0
#: A room a person joins, or one the test stops itself: it must not reach its turn limit
#: first, however slowly a loaded machine runs the client that joins it.
LONG = 400


async def _echo_daemon(tmp_path: Path, delay: float = 0.0) -> tuple[Path, list[str]]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", "Alice", ECHO, delay)
    persona_manifest(manifests, "bob", "Bob", ECHO, delay)
    return manifests, ["--data-dir", str(tmp_path / "data")]


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """Two echoing personas whose replies take 0.3 s: slow enough to watch a reply written,
    and a room is still going when a command has started. Each test reads only rooms of its
    own ids, so they share the daemon and its two persona processes, most of their cost."""
    manifests, args = await _echo_daemon(tmp_path_factory.mktemp("people"), 0.3)
    async with spawn_daemon(manifests, extra_args=args) as shared:
        await shared.wait_online("alice", "bob")
        yield shared


async def _create(daemon: Daemon, room_id: str, max_turns: int) -> None:
    spec = {"id": room_id, "topic": "Tea or coffee?", "members": ["alice", "bob"]}
    spec["limits"] = {"max_turns": max_turns}  # type: ignore[assignment]
    async with daemon.client() as http:
        created = await http.post("/rooms", json=spec)
        assert created.status_code == 201, created.text


async def test_replies_stream_to_observers_and_the_people_routes_answer(daemon: Daemon) -> None:
    await _create(daemon, "flow", 4)
    pieces: dict[int, str] = {}
    messages: dict[int, str] = {}
    with anyio.fail_after(GUARD):
        async with daemon.open_events("/rooms/flow/events?deltas=1") as watch:
            while len(messages) < 4:
                event = decode_live_event(await watch.receive())
                if isinstance(event, DeltaEvent):
                    pieces[event.turn] = pieces.get(event.turn, "") + event.text
                elif isinstance(event, MessageEvent):
                    messages[event.turn] = event.text
    # Turn 1 may have begun before the observer connected; the later ones are whole.
    later = {turn: text for turn, text in messages.items() if turn > 1}
    assert {t: pieces.get(t) for t in later} == later, "the pieces make up each message"
    async with httpx.AsyncClient(base_url=daemon.http) as anyone, daemon.client() as http:
        page = await anyone.get("/")  # the page's files need no token: they hold no data
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert (await anyone.get("/static/app.js")).status_code == 200
        assert (await anyone.get("/static/nope.js")).status_code == 404
        assert (await anyone.get("/static/..%2Fapp.js")).status_code == 404
        assert (await anyone.get("/rooms")).status_code == 401  # the data does
        assert (await anyone.post("/rooms/x/join", json={"name": "C"})).status_code == 401
        await _create(daemon, "open", LONG)
        joined = await http.post("/rooms/open/join", json={"name": "Carol"})
        assert joined.status_code == 200 and joined.json()["member"]["kind"] == "human"
        bad = await http.post("/rooms/open/join", json={"nom": "Carol"})
        assert bad.status_code == 400 and "nom" in bad.json()["error"]["message"]
        assert (await http.post("/rooms/nope/join", json={"name": "C"})).status_code == 404
        stranger = await http.post("/rooms/open/say", json={"member": "zed", "text": "hi"})
        assert stranger.status_code == 400 and "not a person" in stranger.text
        said = await http.post("/rooms/open/say", json={"member": "carol", "text": "hello"})
        assert said.status_code in (200, 202), said.text
        assert (await http.post("/rooms/open/leave", json={"member": "carol"})).status_code == 204
        await http.post("/rooms/open/stop")


async def _read_until(stream: anyio.abc.ByteReceiveStream, wanted: str, seen: list[str]) -> None:
    with anyio.fail_after(GUARD):
        while wanted not in "".join(seen):
            seen.append((await stream.receive()).decode(errors="replace"))


async def test_a_person_joins_from_the_terminal_and_the_next_persona_answers(
    daemon: Daemon,
) -> None:
    await _create(daemon, "desk", LONG)
    env = daemon.env()
    command = [sys.executable, "-m", "mesh.cli", "room", "join", "desk", "--as", "Dave"]
    async with await anyio.open_process(command, env=env) as cli:
        assert cli.stdin is not None and cli.stdout is not None and cli.stderr is not None
        out: list[str] = []
        try:
            await _read_until(cli.stdout, "-- your turn (turn ", out)
        except anyio.EndOfStream:
            pytest.fail(f"mesh room join ended: {(await cli.stderr.receive()).decode()}")
        await cli.stdin.send(b"Hello from the terminal\n")
        await _read_until(cli.stdout, "Dave said: Hello from the terminal", out)
        await cli.stdin.aclose()
        with anyio.fail_after(GUARD):
            await cli.wait()
        errors = (await cli.stderr.receive()).decode()
    assert cli.returncode == 0, errors
    printed = "".join(out)
    assert "Dave (person) joined" in printed and "Dave (person), turn " in printed
    async with daemon.client() as http:
        transcript = (await http.get("/rooms/desk")).json()["transcript"]
        await http.post("/rooms/desk/stop")  # the daemon is shared: leave it no busy room
    assert any(m["agent_id"] == "dave" for m in transcript)
