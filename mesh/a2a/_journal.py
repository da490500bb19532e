"""Tasks on disk, so a task outlives the daemon that ran it.

One SQLite file in the daemon's data directory (``a2a.sqlite3``, beside the
rooms' store) holds a row per task: its owner, agent, creation number, state,
when it last changed, and the task as JSON (status, artifacts, history, the
number of its last event). A row is written whenever the task changes, by one
writer that waits a moment (``WRITE_AFTER``) and then takes every task changed
since its last write, so a reply written in a hundred pieces, or a hundred
tasks served at once, costs a few writes, not a hundred. The event log itself is
not kept: after a restart a re-subscriber's ``Last-Event-ID`` is older than any
event kept, so its stream starts with the task, which says everything the
events did.

The methods block (SQLite, fsync); :class:`~mesh.a2a._tasks.TaskStore` calls
them through ``anyio.to_thread.run_sync``, one at a time.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import msgspec

__all__ = ["FILE", "TaskJournal"]

FILE: Final = "a2a.sqlite3"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    agent TEXT NOT NULL,
    number INTEGER NOT NULL,
    state TEXT NOT NULL,
    changed REAL NOT NULL,
    body BLOB NOT NULL
);
"""


class TaskJournal:
    """The rows of every kept task (see the module docstring)."""

    def __init__(self, directory: str | Path) -> None:
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / FILE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def load(self) -> list[dict[str, Any]]:
        """Every kept task, oldest first: the fields :meth:`write` was given."""
        with self._lock:
            rows = self._db.execute("SELECT body FROM tasks ORDER BY number").fetchall()
        loaded = []
        for (body,) in rows:
            try:
                record = msgspec.json.decode(body)
            except msgspec.DecodeError:
                continue  # a row no version of this code wrote: not a task to serve
            if isinstance(record, dict):
                loaded.append(record)
        return loaded

    def write(self, records: Iterable[dict[str, Any]], gone: Iterable[str] = ()) -> None:
        """Keep ``records`` (each a task as :meth:`Task.record` makes it) and forget the
        tasks ``gone`` names, in one transaction."""
        rows = [
            (
                r["id"],
                r["owner"],
                r["agent"],
                r["number"],
                r["state"],
                r["changed"],
                msgspec.json.encode(r),
            )
            for r in records
        ]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)", rows
                )
                self._db.executemany("DELETE FROM tasks WHERE id = ?", [(i,) for i in gone])
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
