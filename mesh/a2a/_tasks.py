"""Tasks: what an A2A client's message became, kept in a bounded store.

A :class:`Task` is one call to an agent seen the A2A way: a state, a status
message, artifacts, the messages exchanged, and the **log of every event** it
emitted, numbered from 1. A stream is a reader of that log from a cursor, so a
client whose stream dropped re-subscribes with the number of the last event it
saw (``Last-Event-ID``) and gets every later one; a cursor older than the log's
oldest kept event gets the task itself first, which holds everything the lost
events said (states are snapshots; artifacts accumulate).

The :class:`TaskStore` keeps at most ``max_tasks`` tasks and at most
``max_per_owner`` of each owner's; past either bound the oldest *finished* task
goes, and when none has finished a new task is refused (:class:`StoreFull`),
so one client can neither evict another's running work nor grow the store.
A finished task older than ``retention`` seconds is forgotten too.

Given a directory, the store keeps its tasks on
disk (:meth:`TaskStore.keep` writes each change) and takes them back when it
opens (:meth:`TaskStore.load`), so ``GetTask`` answers after a restart. A task
that had not finished when its daemon stopped ends ``FAILED`` then: the call it
was is gone with the process, and no agent will finish it.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
import anyio.to_thread

from mesh.a2a._journal import TaskJournal
from mesh.a2a._wire import INTERRUPTED, TERMINAL
from transports._loop import Scope

__all__ = ["Question", "StoreFull", "Task", "TaskStore"]

#: Events kept per task for re-subscribers; older ones are summed up by the task itself.
MAX_EVENTS: Final = 1024
#: Messages kept in a task's history (the store's default).
MAX_HISTORY: Final = 64
#: What a task that was running when its daemon stopped says, once it is read back.
STOPPED: Final = "the daemon stopped while this task ran; send the message again"
#: How long a stopping daemon may take to write its tasks' last changes.
FLUSH_ON_STOP: Final = 5.0
#: How often, at most, the store looks for finished tasks past their retention.
SWEEP_EVERY: Final = 60.0
#: How long the journal's writer lets changes gather before it writes them: one write
#: (a thread hop, a transaction, an fsync) then holds every task changed meanwhile, and a
#: task that starts and ends within it is written once, as it ended. A daemon that stops
#: writes what is pending (``keep``); a crash may lose this long's changes.
WRITE_AFTER: Final = 0.05


class StoreFull(Exception):
    """No room for a new task: every kept task of the owner (or of all) is still running."""


class _Stamps:
    """Timestamps as A2A writes them (ISO 8601, UTC, milliseconds): every change of a
    task is stamped, so the date and time up to the second are formatted once per second,
    not once per stamp."""

    __slots__ = ("_prefix", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def now(self) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            stamp = datetime.fromtimestamp(second, UTC).isoformat(timespec="seconds")
            self._prefix = stamp.removesuffix("+00:00")
            self._second = second
        return f"{self._prefix}.{int((now - second) * 1000):03d}Z"


now_iso = _Stamps().now

#: The hex digit of a UUID's variant field (RFC 4122: binary 10xx), for each random one.
_VARIANT: Final = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def new_id() -> str:
    """A random (version 4) UUID, as ``str(uuid.uuid4())`` writes it, made from the random
    bytes directly: a served message takes four of them."""
    h = os.urandom(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


@dataclass(eq=False)
class Question:
    """The question a task waits on: its schema, and the answer once it comes."""

    schema: dict[str, Any]
    answer: dict[str, Any] | None = None
    _answered: anyio.Event = field(default_factory=anyio.Event)

    def give(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self._answered.set()

    async def wait(self) -> dict[str, Any]:
        await self._answered.wait()
        assert self.answer is not None
        return self.answer


@dataclass(eq=False)
class Task:
    """One task: its state, and the numbered log of what it emitted."""

    id: str
    context_id: str
    agent: str
    owner: str
    number: int  # the store's creation counter: ListTasks pages by it
    state: str = "TASK_STATE_SUBMITTED"
    status_message: dict[str, Any] | None = None
    timestamp: str = field(default_factory=now_iso)
    history: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    last_event: int = 0
    scope: Scope | None = None
    #: The push configs clients gave (mesh.a2a._push.PushConfig), by id.
    push: dict[str, Any] = field(default_factory=dict)
    max_history: int = MAX_HISTORY
    #: The Message the agent answered with instead of a task's artifacts, if it did.
    reply: dict[str, Any] | None = None
    #: When it last changed (wall clock, seconds): retention counts from here.
    changed_at: float = field(default_factory=time.time)
    #: The question the task's call waits on, while it is INPUT_REQUIRED (mesh.a2a._asking).
    question: Question | None = None
    #: Told of each change (the store, to write the task to disk).
    on_change: Callable[[Task], None] | None = None
    #: Set at the next event; made only when someone waits (most tasks are never waited
    #: on past their first step), and dropped once set.
    _changed: anyio.Event | None = None
    #: Set when it next rests (see :meth:`wait_resting`), made as ``_changed`` is.
    _rested: anyio.Event | None = None

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL

    @property
    def resting(self) -> bool:
        """Finished, or waiting for its client: a stream of it ends here."""
        return self.state in TERMINAL or self.state in INTERRUPTED

    def snapshot(
        self, *, history_length: int | None = None, artifacts: bool = True
    ) -> dict[str, Any]:
        status = self.status()
        task: dict[str, Any] = {"id": self.id, "contextId": self.context_id, "status": status}
        if artifacts and self.artifacts:
            task["artifacts"] = [dict(a, parts=list(a["parts"])) for a in self.artifacts]
        history = self.history if history_length is None else self.history[-history_length:]
        if history and history_length != 0:
            task["history"] = list(history)
        return task

    def status(self) -> dict[str, Any]:
        """The task's ``TaskStatus``: its state, when it was entered, and its message."""
        status: dict[str, Any] = {"state": self.state, "timestamp": self.timestamp}
        if self.status_message is not None:
            status["message"] = self.status_message
        return status

    # -- changing it (each change is an event) -----------------------------------------

    def remember(self, message: dict[str, Any]) -> None:
        self.history.append(message)
        del self.history[: -self.max_history]
        self._touch()

    def _touch(self) -> None:
        self.changed_at = time.time()
        if self.on_change is not None:
            self.on_change(self)

    def set_state(
        self, state: str, message: dict[str, Any] | None = None, *, remember: bool = True
    ) -> None:
        if self.finished:
            return  # a finished task stays as it finished
        self.state, self.status_message, self.timestamp = state, message, now_iso()
        if message is not None and remember:
            self.remember(message)
        rested = self._rested
        if rested is not None and self.resting:
            self._rested = None
            rested.set()
        update = {"taskId": self.id, "contextId": self.context_id, "status": self.status()}
        self._emit({"statusUpdate": update})

    def add_artifact(self, artifact: dict[str, Any], *, append: bool, last: bool) -> None:
        kept = next((a for a in self.artifacts if a["artifactId"] == artifact["artifactId"]), None)
        if kept is None:
            self.artifacts.append(dict(artifact, parts=list(artifact["parts"])))
        elif append:
            kept["parts"].extend(artifact["parts"])
        else:
            kept["parts"] = list(artifact["parts"])
        update = {
            "taskId": self.id,
            "contextId": self.context_id,
            "artifact": artifact,
            "append": append,
            "lastChunk": last,
        }
        self._emit({"artifactUpdate": update})

    def _emit(self, event: dict[str, Any]) -> None:
        self.last_event += 1
        self.events.append((self.last_event, event))
        del self.events[:-MAX_EVENTS]
        self._touch()
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    # -- on disk ---------------------------------------------------------------------------

    def record(self) -> dict[str, Any]:
        """The task as the journal keeps it (no events, no push configs: see _journal)."""
        return {
            "id": self.id,
            "contextId": self.context_id,
            "agent": self.agent,
            "owner": self.owner,
            "number": self.number,
            "state": self.state,
            "status": self.status(),
            "artifacts": self.artifacts,
            "history": self.history,
            "lastEvent": self.last_event,
            "changed": self.changed_at,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any], max_history: int) -> Task:
        """A task read back; one that had not finished ends FAILED (the module says why)."""
        status = record["status"]
        task = cls(
            str(record["id"]),
            str(record["contextId"]),
            str(record["agent"]),
            str(record["owner"]),
            int(record["number"]),
            state=str(record["state"]),
            status_message=status.get("message"),
            timestamp=str(status.get("timestamp") or now_iso()),
            history=list(record.get("history") or [])[-max_history:],
            artifacts=list(record.get("artifacts") or []),
            last_event=int(record.get("lastEvent") or 0),
            max_history=max_history,
            changed_at=float(record.get("changed") or time.time()),
        )
        if not task.finished:
            said = {
                "messageId": new_id(),
                "role": "ROLE_AGENT",
                "parts": [{"text": STOPPED}],
                "contextId": task.context_id,
                "taskId": task.id,
            }
            task.set_state("TASK_STATE_FAILED", said)
        return task

    # -- reading it ----------------------------------------------------------------------

    def events_after(self, cursor: int) -> Iterator[tuple[int, dict[str, Any]]]:
        return ((n, e) for n, e in self.events if n > cursor)

    async def wait_resting(self) -> None:
        """Return once the task rests (finished, or waiting for its client): a blocking
        send's wait, woken once, not at each of the task's events."""
        while not self.resting:
            if self._rested is None:
                self._rested = anyio.Event()
            await self._rested.wait()

    @property
    def changed(self) -> anyio.Event:
        """Set at the next event (take it before reading the log, then wait on it)."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    @property
    def oldest_event(self) -> int:
        """The number of the oldest event still kept (the next one's if none is)."""
        return self.events[0][0] if self.events else self.last_event + 1


class TaskStore:
    """The tasks of every client, bounded, on disk when given a journal (see the module
    docstring)."""

    def __init__(
        self,
        *,
        max_tasks: int = 10_000,
        max_per_owner: int = 1_000,
        max_history: int = MAX_HISTORY,
        retention: float | None = None,
        directory: str | Path | None = None,
    ) -> None:
        """``directory``: where the tasks are kept on disk (None: in memory only)."""
        self.max_tasks = max_tasks
        self.max_per_owner = max_per_owner
        self.max_history = max_history
        self.retention = retention
        self._journal = None if directory is None else TaskJournal(directory)
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        #: Each owner's tasks, oldest first: bounds are checked without a scan of all.
        self._owned: dict[str, OrderedDict[str, Task]] = {}
        self._count = 0
        #: What the journal has yet to be told: tasks changed, tasks forgotten.
        self._dirty: dict[str, Task] = {}
        self._gone: set[str] = set()
        self._wake = anyio.Event()
        self._swept = 0.0

    def __len__(self) -> int:
        return len(self._tasks)

    def create(self, agent: str, owner: str, context_id: str | None) -> Task:
        self._make_room(owner)
        self._count += 1
        task = Task(new_id(), context_id or new_id(), agent, owner, self._count)
        task.max_history = self.max_history
        self._add(task)
        return task

    def _add(self, task: Task) -> None:
        self._tasks[task.id] = task
        self._owned.setdefault(task.owner, OrderedDict())[task.id] = task
        if self._journal is not None:
            task.on_change = self._changed
            self._changed(task)

    def get(self, task_id: str, owner: str, agent: str) -> Task | None:
        """The task, if it is this owner's and this agent's (else, to them, there is none)."""
        task = self._tasks.get(task_id)
        if task is None or task.owner != owner or task.agent != agent:
            return None
        return task

    def listing(self, owner: str, agent: str) -> list[Task]:
        """This owner's tasks of ``agent``, newest first."""
        owned = self._owned.get(owner)
        return [t for t in reversed(owned.values()) if t.agent == agent] if owned else []

    def _make_room(self, owner: str) -> None:
        owned = self._owned.get(owner)
        if owned is not None and len(owned) >= self.max_per_owner:
            self._evict(owned, f"{len(owned)} tasks of this client are kept (the limit)")
        if len(self._tasks) >= self.max_tasks:
            self._evict(self._tasks, f"{len(self._tasks)} tasks are kept (the limit)")

    def _evict(self, candidates: OrderedDict[str, Task], why: str) -> None:
        # Usually the oldest has finished: the scan stops at once.
        oldest = next((t for t in candidates.values() if t.finished), None)
        if oldest is None:
            raise StoreFull(f"{why} and none has finished; wait for one or cancel one")
        self._forget(oldest)

    def _forget(self, task: Task) -> None:
        del self._tasks[task.id]
        owned = self._owned[task.owner]
        del owned[task.id]
        if not owned:
            del self._owned[task.owner]
        task.on_change = None
        self._dirty.pop(task.id, None)
        if self._journal is not None:
            self._gone.add(task.id)
            self._wake.set()

    def sweep(self, now: float | None = None) -> int:
        """Forget the finished tasks older than ``retention``; how many went."""
        if self.retention is None:
            return 0
        cutoff = (time.time() if now is None else now) - self.retention
        old = [t for t in self._tasks.values() if t.finished and t.changed_at < cutoff]
        for task in old:
            self._forget(task)
        return len(old)

    # -- on disk ---------------------------------------------------------------------------

    def _changed(self, task: Task) -> None:
        self._dirty[task.id] = task
        self._wake.set()

    async def load(self) -> int:
        """Take back the journal's tasks (within today's bounds); how many came back."""
        journal = self._journal
        if journal is None:
            return 0
        records = await anyio.to_thread.run_sync(journal.load)
        for record in records:
            try:
                task = Task.from_record(record, self.max_history)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue  # a row this code cannot read is no task of its
            self._count = max(self._count, task.number)
            self._add(task)
        self.sweep()
        for owned in list(self._owned.values()):  # bounds lowered since: the oldest go
            while len(owned) > self.max_per_owner and self._shed(owned):
                pass
        while len(self._tasks) > self.max_tasks and self._shed(self._tasks):
            pass
        return len(self._tasks)

    def _shed(self, candidates: OrderedDict[str, Task]) -> bool:
        oldest = next(iter(candidates.values()), None)
        if oldest is None:
            return False
        self._forget(oldest)
        return True

    async def keep(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Write each change to the journal until cancelled; the last changes are written
        even then (shielded, as a stopping daemon's last word)."""
        task_status.started()
        journal = self._journal
        if journal is None:
            await anyio.sleep_forever()
            return
        try:
            while True:
                await self._wake.wait()
                await anyio.sleep(WRITE_AFTER)
                await self._flush()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(FLUSH_ON_STOP):
                await self._flush()
            journal.close()

    async def _flush(self) -> None:
        journal = self._journal
        assert journal is not None
        self._wake = anyio.Event()
        now = time.time()
        if now - self._swept >= SWEEP_EVERY:
            self._swept = now
            self.sweep(now)
        records = [t.record() for t in self._dirty.values()]
        gone = list(self._gone)
        self._dirty.clear()
        self._gone.clear()
        if records or gone:
            # Taken from the dirty set, so written whatever happens: a cancel mid-write
            # would lose them (a write is milliseconds).
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(journal.write, records, gone)
