"""Durable transcripts: an append-only JSONL log per room, and SQLite kept in step with it.

Layout under the data directory::

    rooms.sqlite3          rooms, members, messages: status, current turn, stop reason
    rooms/<room-id>.jsonl  every event of the room, one JSON object per line

The log is the truth and SQLite a projection of it. :meth:`RoomStore.append`
writes the event's line, flushes and fsyncs it, and only then updates SQLite in
one transaction that also records how far into the log it has read. A crash
between the two leaves the log ahead; :meth:`RoomStore.open` reads each log
from that offset and applies what SQLite missed, and cuts off a torn last line
(a crash mid-write), so the two always agree when the store is open. Because
the log is fsynced per event, SQLite runs with ``synchronous=NORMAL``: whatever
its last transactions lose to a power cut, the log replays.

Writes are idempotent: an event whose ``seq`` is already recorded, or a
``MESSAGE`` for a turn that already has one (the ``(room_id, turn)`` key), is
ignored, so a replayed turn is stored once.

The methods block (an fsync is milliseconds); the room manager calls them
through ``anyio.to_thread.run_sync``, so the event loop never waits on a disk.
One lock serialises them, which also keeps each room's events in order.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import msgspec

from mesh._logging import get_logger
from mesh.rooms._events import (
    AgentJoinedEvent,
    MessageEvent,
    PointEvent,
    ResumedEvent,
    RoomEvent,
    StoppedEvent,
    WelcomeEvent,
    decode_event,
    encode_event,
)
from mesh.rooms._model import Member, Room, RoomSnapshot, RoomStatus, StopReason
from mesh.rooms._state import RoomState, seated

__all__ = ["RoomStore"]

log = get_logger("mesh.rooms.store")

DATABASE: Final = "rooms.sqlite3"
LOGS: Final = "rooms"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS rooms (
    id TEXT PRIMARY KEY,
    topic TEXT NOT NULL,
    mode TEXT NOT NULL,
    config BLOB NOT NULL,
    status TEXT NOT NULL,
    stop_reason TEXT,
    detail TEXT NOT NULL DEFAULT '',
    current_turn INTEGER NOT NULL DEFAULT 0,
    last_seq INTEGER NOT NULL,
    log_offset INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    owner TEXT
);
CREATE TABLE IF NOT EXISTS members (
    room_id TEXT NOT NULL REFERENCES rooms (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    agent_id TEXT NOT NULL,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    PRIMARY KEY (room_id, position),
    UNIQUE (room_id, agent_id)
);
CREATE TABLE IF NOT EXISTS messages (
    room_id TEXT NOT NULL REFERENCES rooms (id) ON DELETE CASCADE,
    turn INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    agent_id TEXT NOT NULL,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    step TEXT,
    text TEXT NOT NULL,
    score REAL NOT NULL,
    timestamp INTEGER NOT NULL,
    interjection INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (room_id, turn)
);
CREATE INDEX IF NOT EXISTS rooms_by_status ON rooms (status);
CREATE INDEX IF NOT EXISTS rooms_by_age ON rooms (created_at, id);
"""
#: Indexes on columns a database made before them gains on opening.
_LATE_INDEXES: Final = "CREATE INDEX IF NOT EXISTS rooms_by_owner ON rooms (owner, status);"

_MESSAGE_COLUMNS: Final = (
    "room_id, seq, timestamp, agent_id, name, role, turn, text, score, step, interjection"
)
_MESSAGE_PLACES: Final = ", ".join("?" * 11)
#: Columns added since the first schema, for databases made before them.
_ADDED_COLUMNS: Final = {
    "messages": {"interjection": "INTEGER NOT NULL DEFAULT 0"},
    "rooms": {"owner": "TEXT"},  # the room's ``owner``, so rooms are counted per owner
}
_ROOM_CONFIG: Final = msgspec.json.Decoder(Room)


class RoomStore:
    """The rooms under one data directory. ``with RoomStore(path) as store:`` opens it."""

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    # -- lifetime ------------------------------------------------------------------------

    def open(self) -> None:
        """Create the layout if needed, and bring SQLite up to date with every log."""
        (self.directory / LOGS).mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(
            self.directory / DATABASE, isolation_level=None, check_same_thread=False
        )
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA foreign_keys = ON")
        db.executescript(_SCHEMA)
        if "owner" in _add_missing_columns(db).get("rooms", ()):
            _fill_owners(db)
        db.executescript(_LATE_INDEXES)
        self._db = db
        with self._lock:
            for path in sorted((self.directory / LOGS).glob("*.jsonl")):
                self._catch_up(path)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def log_path(self, room_id: str) -> Path:
        return self.directory / LOGS / f"{room_id}.jsonl"

    # -- writing -------------------------------------------------------------------------

    def append(self, event: RoomEvent) -> bool:
        """Record one event (log first, then SQLite). False if it was already recorded."""
        with self._lock:
            db = self._connection()
            row = db.execute("SELECT last_seq FROM rooms WHERE id = ?", (event.room_id,)).fetchone()
            last_seq = row[0] if row else 0
            if event.seq <= last_seq or (isinstance(event, MessageEvent) and self._has_turn(event)):
                return False
            if row is None and not isinstance(event, WelcomeEvent):
                raise ValueError(f"room {event.room_id!r} has no WELCOME event yet")
            if event.seq != last_seq + 1:
                raise ValueError(
                    f"room {event.room_id}: event seq {event.seq} does not follow {last_seq}"
                )
            offset = self._write_line(event)
            with self._transaction() as tx:
                _project(tx, event, offset)
            return True

    def _has_turn(self, event: MessageEvent) -> bool:
        query = "SELECT 1 FROM messages WHERE room_id = ? AND turn = ?"
        return self._connection().execute(query, (event.room_id, event.turn)).fetchone() is not None

    def _write_line(self, event: RoomEvent) -> int:
        path = self.log_path(event.room_id)
        new = not path.exists()
        with path.open("ab") as file:
            file.write(encode_event(event) + b"\n")
            file.flush()
            if self.fsync:
                os.fsync(file.fileno())
            offset = file.tell()
        if new and self.fsync:
            _fsync_directory(path.parent)  # so the new file's name survives a power cut too
        return offset

    def delete(self, room_id: str) -> bool:
        """Remove a room for good: its rows, then its log. False if there was no such room."""
        with self._lock:
            known = self._connection().execute("SELECT 1 FROM rooms WHERE id = ?", (room_id,))
            if known.fetchone() is None:
                return False
            # Rows first: a crash between the two leaves a log that the next open
            # replays into a room again, rather than rows that point at no log.
            self._forget(room_id)
            self.log_path(room_id).unlink(missing_ok=True)
            return True

    # -- reading -------------------------------------------------------------------------

    def has_room(self, room_id: str) -> bool:
        with self._lock:
            row = self._connection().execute("SELECT 1 FROM rooms WHERE id = ?", (room_id,))
            return row.fetchone() is not None

    def snapshot(self, room_id: str) -> RoomSnapshot | None:
        with self._lock:
            row = self._connection().execute(_SNAPSHOT_QUERY + " WHERE id = ?", (room_id,))
            found = row.fetchone()
        return None if found is None else _snapshot(found)

    def snapshots(self, status: RoomStatus | None = None) -> list[RoomSnapshot]:
        """Every room (or every room with ``status``), oldest first."""
        query, params = _SNAPSHOT_QUERY, tuple[str, ...]()
        if status is not None:
            query, params = query + " WHERE status = ?", (str(status),)
        with self._lock:
            rows = self._connection().execute(query + " ORDER BY created_at, id", params).fetchall()
        return [_snapshot(row) for row in rows]

    def newest(self, limit: int, before: tuple[int, str] | None = None) -> list[RoomSnapshot]:
        """At most ``limit`` rooms, newest first; with ``before`` (a room's ``created_at``
        and id), only those made before it: the next page of a listing."""
        query, params = _SNAPSHOT_QUERY, tuple[object, ...]()
        if before is not None:
            query, params = query + " WHERE (created_at, id) < (?, ?)", before
        query += " ORDER BY created_at DESC, id DESC LIMIT ?"
        with self._lock:
            rows = self._connection().execute(query, (*params, limit)).fetchall()
        return [_snapshot(row) for row in rows]

    def owned(self, owner: str) -> tuple[int, int]:
        """How many rooms ``owner`` keeps, and how many of them are not stopped."""
        query = "SELECT COUNT(*), COUNT(*) FILTER (WHERE status != ?) FROM rooms WHERE owner = ?"
        with self._lock:
            kept, active = self._connection().execute(query, ("stopped", owner)).fetchone()
        return int(kept), int(active)

    def count(self, *statuses: RoomStatus) -> int:
        """How many rooms have one of ``statuses``."""
        marks = ", ".join("?" * len(statuses))
        query = f"SELECT COUNT(*) FROM rooms WHERE status IN ({marks})"
        with self._lock:
            row = self._connection().execute(query, tuple(map(str, statuses))).fetchone()
        return int(row[0])

    def messages(self, room_id: str) -> list[MessageEvent]:
        """The room's transcript from SQLite, in turn order."""
        query = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE room_id = ? ORDER BY turn"
        with self._lock:
            rows = self._connection().execute(query, (room_id,)).fetchall()
        return [_message(row) for row in rows]

    def load(self, room_id: str) -> RoomState | None:
        """The room's state from SQLite, ready for its engine to continue."""
        snapshot = self.snapshot(room_id)
        if snapshot is None:
            return None
        transcript = self.messages(room_id)
        point = self.point(room_id) if snapshot.room.agenda else None
        return RoomState(
            room=snapshot.room,
            status=snapshot.status,
            stop_reason=snapshot.stop_reason,
            detail=snapshot.detail,
            last_seq=snapshot.last_seq,
            updated_at=snapshot.updated_at,
            transcript=transcript,
            holders=self.holders(room_id),
            point=None if point is None else point.index,
            point_since=0 if point is None else sum(m.seq < point.seq for m in transcript),
        )

    def point(self, room_id: str) -> PointEvent | None:
        """A room with an agenda: the last ``POINT`` its log holds (the point it is on)."""
        with self._lock:
            path = self.log_path(room_id)
            data = path.read_bytes() if path.exists() else b""
        last: PointEvent | None = None
        for line in data.splitlines():
            if b'"POINT"' not in line:
                continue  # the other events: not decoded for nothing
            event = _decode_line(line)
            if isinstance(event, PointEvent):
                last = event
        return last

    def holders(self, room_id: str) -> dict[str, str]:
        """Who holds each person's seat: the first holder each ``AGENT_JOINED`` names."""
        with self._lock:
            path = self.log_path(room_id)
            data = path.read_bytes() if path.exists() else b""
        held: dict[str, str] = {}
        for line in data.splitlines():
            if b'"AGENT_JOINED"' not in line or b'"holder":null' in line:
                continue  # messages and unheld joins: not decoded for nothing
            event = _decode_line(line)
            if isinstance(event, AgentJoinedEvent) and event.holder is not None:
                held.setdefault(event.agent_id, event.holder)
        return held

    def events(self, room_id: str, since: int = 0) -> list[RoomEvent]:
        """The room's events from its log with ``seq > since``, in order."""
        with self._lock:
            path = self.log_path(room_id)
            data = path.read_bytes() if path.exists() else b""
        events = (_decode_line(line) for line in data.splitlines() if line)
        return [event for event in events if event is not None and event.seq > since]

    # -- recovery ------------------------------------------------------------------------

    def _catch_up(self, path: Path) -> None:
        """Apply the part of one log that SQLite has not seen; cut a torn tail."""
        room_id = path.stem
        row = (
            self._connection()
            .execute("SELECT last_seq, log_offset FROM rooms WHERE id = ?", (room_id,))
            .fetchone()
        )
        last_seq, start = row if row else (0, 0)
        size = path.stat().st_size
        if size == start:
            return
        if size < start:
            log.error("rooms.log_shorter_than_db", room=room_id, log_bytes=size, db_offset=start)
            self._forget(room_id)
            last_seq, start = 0, 0
        with path.open("rb") as file:
            file.seek(start)
            tail = file.read()
        applied, good = 0, start
        for line in tail.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # torn: the process died writing it; cut below
            event = _decode_line(line)
            if event is None or (last_seq == 0 and not isinstance(event, WelcomeEvent)):
                # Not ours to repair: keep the file, stop here, say so.
                log.error("rooms.log_unreadable", room=room_id, at=good)
                return
            good += len(line)
            if event.seq > last_seq:
                with self._transaction() as tx:
                    _project(tx, event, good)
                last_seq, applied = event.seq, applied + 1
        if good < size:
            log.warning("rooms.log_torn_tail", room=room_id, at=good, dropped=size - good)
            with path.open("r+b") as file:
                file.truncate(good)
                os.fsync(file.fileno())
        if applied:
            log.info("rooms.log_replayed", room=room_id, events=applied)

    def _forget(self, room_id: str) -> None:
        with self._transaction() as tx:
            tx.execute("DELETE FROM rooms WHERE id = ?", (room_id,))

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the room store is not open")
        return self._db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


_SNAPSHOT_QUERY: Final = (
    "SELECT config, status, current_turn, stop_reason, detail, last_seq, updated_at FROM rooms"
)


def _seat(db: sqlite3.Connection, room_id: str, member: Member) -> None:
    """A person joined: their seat goes into the room's config and members."""
    (config,) = db.execute("SELECT config FROM rooms WHERE id = ?", (room_id,)).fetchone()
    room = _ROOM_CONFIG.decode(config)
    grown = seated(room, member)
    if grown is room:
        return
    db.execute("UPDATE rooms SET config = ? WHERE id = ?", (msgspec.json.encode(grown), room_id))
    db.execute(
        "INSERT INTO members (room_id, position, agent_id, name, role) VALUES (?, ?, ?, ?, ?)",
        (room_id, len(room.members), member.id, member.name, member.role),
    )


def _add_missing_columns(db: sqlite3.Connection) -> dict[str, list[str]]:
    """Add the columns a database made before them lacks; the ones added, per table."""
    added: dict[str, list[str]] = {}
    for table, columns in _ADDED_COLUMNS.items():
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        for column, declaration in columns.items():
            if column not in present:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                added.setdefault(table, []).append(column)
    return added


def _fill_owners(db: sqlite3.Connection) -> None:
    """Rooms recorded before the owner had a column of its own: from their config, once."""
    rows = db.execute("SELECT id, config FROM rooms").fetchall()
    owners = [(_ROOM_CONFIG.decode(config).owner, room_id) for room_id, config in rows]
    db.executemany("UPDATE rooms SET owner = ? WHERE id = ?", owners)


def _snapshot(row: tuple[Any, ...]) -> RoomSnapshot:
    config, status, current_turn, stop_reason, detail, last_seq, updated_at = row
    return RoomSnapshot(
        room=_ROOM_CONFIG.decode(config),
        status=RoomStatus(status),
        current_turn=current_turn,
        stop_reason=None if stop_reason is None else StopReason(stop_reason),
        detail=detail,
        last_seq=last_seq,
        updated_at=updated_at,
    )


def _message(row: tuple[Any, ...]) -> MessageEvent:
    room_id, seq, timestamp, agent_id, name, role, turn, text, score, step, interjection = row
    return MessageEvent(
        room_id=room_id,
        seq=seq,
        timestamp=timestamp,
        agent_id=agent_id,
        name=name,
        role=role,
        turn=turn,
        text=text,
        score=score,
        step=step,
        interjection=bool(interjection),
    )


def _decode_line(line: bytes) -> RoomEvent | None:
    """The event on one log line, or None if it does not decode."""
    try:
        return decode_event(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _project(db: sqlite3.Connection, event: RoomEvent, offset: int) -> None:
    """Apply one event to the SQLite tables, inside the caller's transaction."""
    room_id = event.room_id
    if isinstance(event, WelcomeEvent):
        room = event.room
        db.execute(
            "INSERT INTO rooms (id, topic, mode, config, status, last_seq, log_offset,"
            " created_at, updated_at, owner) VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?, ?)",
            (
                room_id,
                room.topic,
                room.mode,
                msgspec.json.encode(room),
                "running",
                room.created_at,
                event.timestamp,
                room.owner,
            ),
        )
        db.executemany(
            "INSERT INTO members (room_id, position, agent_id, name, role) VALUES (?, ?, ?, ?, ?)",
            [(room_id, n, m.id, m.name, m.role) for n, m in enumerate(room.members)],
        )
    elif isinstance(event, MessageEvent):
        db.execute(
            f"INSERT OR IGNORE INTO messages ({_MESSAGE_COLUMNS}) VALUES ({_MESSAGE_PLACES})",
            (
                room_id,
                event.seq,
                event.timestamp,
                event.agent_id,
                event.name,
                event.role,
                event.turn,
                event.text,
                event.score,
                event.step,
                event.interjection,
            ),
        )
        db.execute("UPDATE rooms SET current_turn = ? WHERE id = ?", (event.turn, room_id))
    elif isinstance(event, AgentJoinedEvent) and event.member is not None:
        _seat(db, room_id, event.member)
    elif isinstance(event, StoppedEvent):
        status = "paused" if event.reason is StopReason.PAUSED else "stopped"
        db.execute(
            "UPDATE rooms SET status = ?, stop_reason = ?, detail = ? WHERE id = ?",
            (status, str(event.reason), event.detail, room_id),
        )
    elif isinstance(event, ResumedEvent):
        db.execute(
            "UPDATE rooms SET status = 'running', stop_reason = NULL, detail = '' WHERE id = ?",
            (room_id,),
        )
    db.execute(
        "UPDATE rooms SET last_seq = ?, log_offset = ?, updated_at = ? WHERE id = ?",
        (event.seq, offset, event.timestamp, room_id),
    )


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
