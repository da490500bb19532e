"""The durable transcript: JSONL first, SQLite in step, idempotent, repaired after a crash."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
from structlog.testing import capture_logs

from mesh.rooms import (
    AgentJoinedEvent,
    MessageEvent,
    ResumedEvent,
    RoomEvent,
    RoomId,
    RoomStatus,
    StoppedEvent,
    StopReason,
    WelcomeEvent,
    encode_event,
)
from mesh.rooms._state import RoomState
from mesh.rooms._store import RoomStore

from ._helpers import ROOM, assert_log_and_db_agree, make_room, read_log


def history() -> list[RoomEvent]:
    room = make_room()
    events: list[RoomEvent] = [
        WelcomeEvent(room_id=ROOM, seq=1, timestamp=10, room=room),
        AgentJoinedEvent(room_id=ROOM, seq=2, timestamp=11, agent_id="alice", name="Alice"),
        AgentJoinedEvent(room_id=ROOM, seq=3, timestamp=12, agent_id="bob", name="Bob"),
    ]
    for turn in range(1, 5):
        who = "alice" if turn % 2 else "bob"
        events.append(
            MessageEvent(
                room_id=ROOM,
                seq=3 + turn,
                timestamp=12 + turn,
                agent_id=who,
                name=who.title(),
                turn=turn,
                text=f"message {turn}",
                score=turn / 10,
            )
        )
    return events


def test_events_go_to_the_log_and_sqlite_and_read_back_the_same(tmp_path: Path) -> None:
    events = history()
    with RoomStore(tmp_path) as store:
        assert all(store.append(event) for event in events)
        assert store.events(ROOM) == events
        assert store.events(ROOM, since=5) == events[5:]
        assert store.messages(ROOM) == [e for e in events if isinstance(e, MessageEvent)]
        snapshot = store.snapshot(ROOM)
        assert snapshot is not None
        assert (snapshot.status, snapshot.current_turn, snapshot.last_seq) == (
            RoomStatus.RUNNING,
            4,
            7,
        )
        assert store.load(ROOM) == RoomState.from_events(events)
    assert read_log(tmp_path / "rooms" / "r1.jsonl") == events
    assert_log_and_db_agree(tmp_path, ROOM)


def test_writes_are_idempotent_by_seq_and_by_turn(tmp_path: Path) -> None:
    events = history()
    with RoomStore(tmp_path) as store:
        for event in events:
            store.append(event)
        assert not store.append(events[4])  # the same event again
        replayed_turn = MessageEvent(room_id=ROOM, seq=8, agent_id="bob", turn=4, text="again")
        assert not store.append(replayed_turn)  # a second message for turn 4
        assert store.append(StoppedEvent(room_id=ROOM, seq=8, reason=StopReason.MAX_TURNS, turn=4))
        with pytest.raises(ValueError, match="seq 10 does not follow 8"):
            store.append(ResumedEvent(room_id=ROOM, seq=10, next_turn=5))
        with pytest.raises(ValueError, match="no WELCOME"):
            store.append(ResumedEvent(room_id=RoomId("other"), seq=1, next_turn=1))
    assert len(read_log(tmp_path / "rooms" / "r1.jsonl")) == 8
    assert_log_and_db_agree(tmp_path, ROOM)


def test_a_crash_between_log_and_sqlite_is_replayed_at_open(tmp_path: Path) -> None:
    events = history()
    with RoomStore(tmp_path) as store:
        for event in events[:5]:
            store.append(event)
    # The process died after writing two more lines to the log, before SQLite saw them.
    with (tmp_path / "rooms" / "r1.jsonl").open("ab") as log:
        for event in events[5:]:
            log.write(encode_event(event) + b"\n")
    with capture_logs() as logs, RoomStore(tmp_path) as store:
        assert store.messages(ROOM) == [e for e in events if isinstance(e, MessageEvent)]
        snapshot = store.snapshot(ROOM)
        assert snapshot is not None and snapshot.current_turn == 4
    assert {"event": "rooms.log_replayed", "room": "r1", "events": 2, "log_level": "info"} in logs
    assert_log_and_db_agree(tmp_path, ROOM)


def test_a_torn_last_line_is_cut_off(tmp_path: Path) -> None:
    events = history()
    with RoomStore(tmp_path) as store:
        for event in events:
            store.append(event)
    path = tmp_path / "rooms" / "r1.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"type":"MESSAGE","room_id":"r1","seq":8,"tu')  # killed mid-write
    with capture_logs() as logs, RoomStore(tmp_path) as store:
        assert store.events(ROOM) == events
        more = StoppedEvent(room_id=ROOM, seq=8, reason=StopReason.STOPPED, turn=4)
        assert store.append(more)
    assert path.read_bytes() == whole + encode_event(more) + b"\n"
    assert any(entry["event"] == "rooms.log_torn_tail" for entry in logs)
    assert_log_and_db_agree(tmp_path, ROOM)


def test_sqlite_lost_entirely_is_rebuilt_from_the_logs(tmp_path: Path) -> None:
    events = history()
    with RoomStore(tmp_path) as store:
        for event in events:
            store.append(event)
    for file in tmp_path.glob("rooms.sqlite3*"):
        file.unlink()
    with RoomStore(tmp_path) as store:
        assert store.load(ROOM) == RoomState.from_events(events)
        assert [s.id for s in store.snapshots()] == ["r1"]
        assert store.snapshots(RoomStatus.STOPPED) == []


def _welcome(room_id: str, owner: str | None, created_at: int) -> WelcomeEvent:
    room = msgspec.structs.replace(make_room(room_id=room_id), owner=owner, created_at=created_at)
    return WelcomeEvent(room_id=RoomId(room_id), seq=1, timestamp=created_at, room=room)


def test_rooms_are_counted_per_owner_and_listed_newest_first_by_pages(tmp_path: Path) -> None:
    with RoomStore(tmp_path) as store:
        for n, owner in enumerate(("token:a", "token:a", "token:b", None, "token:a"), 1):
            assert store.append(_welcome(f"r{n}", owner, created_at=100 + n))
        stop = StoppedEvent(room_id=RoomId("r1"), seq=2, reason=StopReason.STOPPED, turn=0)
        assert store.append(stop)
        assert store.owned("token:a") == (3, 2)  # r1 (stopped), r2, r5
        assert (store.owned("token:b"), store.owned("token:c")) == ((1, 1), (0, 0))
        assert [s.id for s in store.newest(2)] == ["r5", "r4"]
        assert [s.id for s in store.newest(2, before=(104, "r4"))] == ["r3", "r2"]
        assert [s.id for s in store.newest(9, before=(102, "r2"))] == ["r1"]


def test_a_database_from_before_the_owner_column_gains_it_filled_in(tmp_path: Path) -> None:
    with RoomStore(tmp_path) as store:
        store.append(_welcome("old", "token:a", created_at=1))
    # The database as an older daemon left it: no owner column.
    with sqlite3.connect(tmp_path / "rooms.sqlite3") as db:
        db.execute("DROP INDEX rooms_by_owner")
        db.execute("ALTER TABLE rooms DROP COLUMN owner")
    with RoomStore(tmp_path) as store:
        assert store.owned("token:a") == (1, 1)
        store.append(_welcome("new", "token:a", created_at=2))
        assert store.owned("token:a") == (2, 2)


def test_the_store_must_be_open(tmp_path: Path) -> None:
    store = RoomStore(tmp_path)
    with pytest.raises(RuntimeError, match="not open"):
        store.append(history()[0])
