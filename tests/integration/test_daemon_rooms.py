"""Rooms through the real daemon: observers, the CLI, and a SIGKILL mid-room."""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh.rooms import (
    AgentJoinedEvent,
    MessageEvent,
    PointEvent,
    ResumedEvent,
    StoppedEvent,
    WelcomeEvent,
    decode_event,
)
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.integration._daemon import persona_manifest

pytestmark = pytest.mark.anyio

ALICE = ["Tea keeps me calm.", "Coffee is faster, I admit.", "Let us try both."]
BOB = ["Coffee wakes me up.", "Tea is gentler.", "Agreed: both, then."]


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """Alice and Bob, answering at once, for the tests that each run rooms of their own ids
    and read only those: a daemon and its two persona processes are most of what each of
    them would cost. The SIGKILL, the list's pages and its order keep daemons of their own."""
    manifests = tmp_path_factory.mktemp("rooms-manifests")
    persona_manifest(manifests, "alice", "Alice", ALICE, 0.0)
    persona_manifest(manifests, "bob", "Bob", BOB, 0.0)
    data = ["--data-dir", str(tmp_path_factory.mktemp("rooms-data"))]
    async with spawn_daemon(manifests, extra_args=data) as shared:
        await shared.wait_online("alice", "bob")
        yield shared


async def watch_room(daemon: Daemon, room_id: str, until: Callable[[Any], bool]) -> list[Any]:
    """The room's events, from its first, up to the first one ``until`` accepts (bounded)."""
    events: list[Any] = []
    with anyio.fail_after(60):
        async with daemon.open_events(f"/rooms/{room_id}/events") as watch:
            while not events or not until(events[-1]):
                events.append(decode_event(await watch.receive()))
    return events


async def test_a_room_runs_and_an_observer_sees_every_event_in_order(daemon: Daemon) -> None:
    async with daemon.client() as http:
        spec = {
            "id": "tea",
            "topic": "Tea or coffee?",
            "members": ["alice", "bob"],
            "limits": {"max_turns": 10},
        }
        created = await http.post("/rooms", json=spec)
        assert created.status_code == 201, created.text
        events = await watch_room(daemon, "tea", lambda e: isinstance(e, StoppedEvent))
        assert isinstance(events[0], WelcomeEvent)
        assert [e.seq for e in events] == sorted(e.seq for e in events)
        messages = [e for e in events if isinstance(e, MessageEvent)]
        assert [m.turn for m in messages] == list(range(1, 11))
        assert [m.name for m in messages[:4]] == ["Alice", "Bob", "Alice", "Bob"]
        stopped = events[-1]
        assert isinstance(stopped, StoppedEvent) and stopped.reason == "MAX_TURNS"
        shown = (await http.get("/rooms/tea")).json()
        assert len(shown["transcript"]) == 10 and shown["room"]["stop_reason"] == "MAX_TURNS"
        assert (await http.get("/rooms/nope")).status_code == 404
        bad = await http.post("/rooms", json={"topic": "x", "members": ["alice"]})
        assert bad.status_code == 400 and "two members" in bad.json()["error"]["message"]
    env = daemon.env()
    run = await anyio.run_process(
        [
            sys.executable,
            "-m",
            "mesh.cli",
            "room",
            "run",
            "--topic",
            "Tea again?",
            "--agent",
            "bob",
            "--agent",
            "alice",
            "--max-turns",
            "4",
        ],
        env=env,
        check=False,
    )
    out = run.stdout.decode()
    assert run.returncode == 0, run.stderr.decode()
    assert out.count("), turn ") == 4 and "Bob (participant), turn 1" in out
    assert "stopped: MAX_TURNS" in run.stderr.decode()
    exported = await anyio.run_process(
        [sys.executable, "-m", "mesh.cli", "room", "export", "tea", "--format", "md"], env=env
    )
    assert "Tea or coffee?" in exported.stdout.decode()


async def test_sigkill_mid_room_then_restart_resumes_with_every_turn_once(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", "Alice", ALICE, 0.15)
    persona_manifest(manifests, "bob", "Bob", BOB, 0.15)
    data = tmp_path / "data"
    args = ["--data-dir", str(data)]
    async with spawn_daemon(manifests, extra_args=args) as daemon:
        await daemon.wait_online("alice", "bob")
        async with daemon.client() as http:
            spec = {
                "id": "long",
                "topic": "Tea or coffee?",
                "members": ["alice", "bob"],
                "limits": {"max_turns": 12},
            }
            assert (await http.post("/rooms", json=spec)).status_code == 201
        await watch_room(daemon, "long", lambda e: isinstance(e, MessageEvent) and e.turn >= 3)
        daemon.process.send_signal(signal.SIGKILL)
        await daemon.process.wait()
    async with spawn_daemon(manifests, extra_args=args) as daemon:
        await watch_room(daemon, "long", lambda e: isinstance(e, StoppedEvent))
        async with daemon.client() as http:
            final = (await http.get("/rooms/long")).json()
    turns = [m["turn"] for m in final["transcript"]]
    assert turns == list(range(1, 13)), turns
    assert final["room"]["stop_reason"] == "MAX_TURNS"
    logged = [json.loads(line) for line in (data / "rooms" / "long.jsonl").read_text().splitlines()]
    logged_turns = [(e["turn"], e["text"]) for e in logged if e["type"] == "MESSAGE"]
    with sqlite3.connect(data / "rooms.sqlite3") as db:
        stored = db.execute(
            "SELECT turn, text FROM messages WHERE room_id = 'long' ORDER BY turn"
        ).fetchall()
    assert (
        logged_turns
        == [tuple(row) for row in stored]
        == [(m["turn"], m["text"]) for m in final["transcript"]]
    )
    assert any(e["type"] == "RESUMED" for e in logged)


async def test_a_room_with_an_agenda_through_the_daemon_and_its_bounds(daemon: Daemon) -> None:
    async with daemon.client() as http:
        base = {"topic": "Tea or coffee?", "members": ["alice", "bob"]}
        refused = {
            "length <= 12 - at `$.agenda`": {
                **base,
                "agenda": [f"point {n}" for n in range(13)],
            },
            "length <= 200 - at `$.agenda[1]`": {**base, "agenda": ["taste", "x" * 201]},
            "agenda point 1 is empty": {**base, "agenda": [" "]},
            "an agenda is for a chat": {**base, "mode": "review", "agenda": ["taste"]},
        }
        for words, body in refused.items():
            bad = await http.post("/rooms", json=body)
            assert bad.status_code == 400, (words, bad.text)
            assert words in bad.json()["error"]["message"]
        spec = {
            **base,
            "id": "agenda",
            "agenda": ["the taste", "the price"],
            "limits": {"max_turns": 10, "turns_per_point": 2},
        }
        created = await http.post("/rooms", json=spec)
        assert created.status_code == 201, created.text
        events = await watch_room(daemon, "agenda", lambda e: isinstance(e, StoppedEvent))
        shown = (await http.get("/rooms/agenda")).json()["room"]
    kinds = [e.__struct_config__.tag for e in events if not isinstance(e, AgentJoinedEvent)]
    assert kinds == [
        "WELCOME",
        "POINT",
        "MESSAGE",
        "MESSAGE",
        "POINT",
        "MESSAGE",
        "MESSAGE",
        "STOPPED",
    ]
    points = [e for e in events if isinstance(e, PointEvent)]
    assert [(p.index, p.point) for p in points] == [(0, "the taste"), (1, "the price")]
    assert shown["room"]["agenda"] == ["the taste", "the price"]
    assert shown["stop_reason"] == "MAX_TURNS" and "the agenda's last" in shown["detail"]


async def test_the_rooms_list_comes_newest_first_a_page_at_a_time(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    persona_manifest(manifests, "alice", "Alice", ALICE, 0.0)
    persona_manifest(manifests, "bob", "Bob", BOB, 0.0)
    async with spawn_daemon(manifests) as daemon:
        await daemon.wait_online("alice", "bob")
        async with daemon.client() as http:
            for n in range(1, 6):
                spec = {"id": f"r{n}", "topic": "Tea?", "members": ["alice", "bob"]}
                created = await http.post("/rooms", json=spec | {"limits": {"max_turns": 1}})
                assert created.status_code == 201, created.text
            pages: list[list[str]] = []
            cursor = None
            for _ in range(5):  # three pages are expected; a cursor that never ends fails below
                query: dict[str, Any] = {"limit": 2} | ({"before": cursor} if cursor else {})
                listed = (await http.get("/rooms", params=query)).json()
                pages.append([shown["room"]["id"] for shown in listed["rooms"]])
                if (cursor := listed["next"]) is None:
                    break
            assert pages == [["r5", "r4"], ["r3", "r2"], ["r1"]]
            # A page that holds exactly what is left says there is no next one.
            whole = (await http.get("/rooms", params={"limit": 5})).json()
            assert [shown["room"]["id"] for shown in whole["rooms"]] == [
                "r5",
                "r4",
                "r3",
                "r2",
                "r1",
            ]
            assert whole["next"] is None
            for bad in ({"limit": 0}, {"limit": 1001}, {"limit": "²"}, {"before": "r1"}):
                refused = await http.get("/rooms", params=bad)
                assert refused.status_code == 400, (bad, refused.text)
                assert refused.json()["error"]["message"].startswith(next(iter(bad)))


async def test_a_room_created_paused_takes_no_turn_until_resumed(daemon: Daemon) -> None:
    async with daemon.client() as http:
        spec: dict[str, Any] = {"topic": "Tea?", "members": ["alice", "bob"]}
        bad = await http.post("/rooms", json={**spec, "paused": "yes"})
        assert bad.status_code == 400, bad.text
        message = bad.json()["error"]["message"]
        assert message == "invalid room spec: Expected `bool`, got `str` - at `$.paused`"
        spec |= {"id": "waits", "paused": True, "limits": {"max_turns": 4}}
        created = await http.post("/rooms", json=spec)
        assert created.status_code == 201, created.text
        assert created.json()["status"] == "paused", created.text
        # Listed, shown and recorded as a room paused before its first turn.
        listed = (await http.get("/rooms")).json()["rooms"][0]  # the newest
        assert listed["room"]["id"] == "waits"
        assert (listed["status"], listed["current_turn"]) == ("paused", 0)
        assert (listed["stop_reason"], listed["detail"]) == ("PAUSED", "paused on request")
        shown = (await http.get("/rooms/waits")).json()
        assert shown["transcript"] == [] and shown["room"]["status"] == "paused"
        logged = (await http.get("/rooms/waits/events")).json()["events"]
        kinds = [e["type"] for e in logged]
        assert kinds == ["WELCOME", "AGENT_JOINED", "AGENT_JOINED", "STOPPED"]
        assert (logged[-1]["reason"], logged[-1]["turn"]) == ("PAUSED", 0)
        # Resumed, it takes its turns from the first: nothing was said while paused.
        resumed = await http.post("/rooms/waits/resume")
        assert resumed.status_code == 200, resumed.text
        events = await watch_room(daemon, "waits", lambda e: _stopped_after(e, len(logged)))
    tail = events[len(logged) :]
    assert isinstance(tail[0], ResumedEvent) and tail[0].next_turn == 1
    assert [e.turn for e in tail if isinstance(e, MessageEvent)] == [1, 2, 3, 4]
    assert isinstance(tail[-1], StoppedEvent) and tail[-1].reason == "MAX_TURNS"


def _stopped_after(event: Any, seq: int) -> bool:
    return isinstance(event, StoppedEvent) and event.seq > seq
