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
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import anyio

from mesh.a2a._wire import INTERRUPTED, TERMINAL

__all__ = ["StoreFull", "Task", "TaskStore"]

#: Events kept per task for re-subscribers; older ones are summed up by the task itself.
MAX_EVENTS: Final = 1024
#: Messages kept in a task's history.
MAX_HISTORY: Final = 64


class StoreFull(Exception):
    """No room for a new task: every kept task of the owner (or of all) is still running."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id() -> str:
    return str(uuid.uuid4())


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
    scope: anyio.CancelScope | None = None
    #: The push configs clients gave (mesh.a2a._push.PushConfig), by id.
    push: dict[str, Any] = field(default_factory=dict)
    _changed: anyio.Event = field(default_factory=anyio.Event)

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
        status: dict[str, Any] = {"state": self.state, "timestamp": self.timestamp}
        if self.status_message is not None:
            status["message"] = self.status_message
        task: dict[str, Any] = {"id": self.id, "contextId": self.context_id, "status": status}
        if artifacts and self.artifacts:
            task["artifacts"] = [dict(a, parts=list(a["parts"])) for a in self.artifacts]
        history = self.history if history_length is None else self.history[-history_length:]
        if history and history_length != 0:
            task["history"] = list(history)
        return task

    # -- changing it (each change is an event) -----------------------------------------

    def remember(self, message: dict[str, Any]) -> None:
        self.history.append(message)
        del self.history[:-MAX_HISTORY]

    def set_state(
        self, state: str, message: dict[str, Any] | None = None, *, remember: bool = True
    ) -> None:
        if self.finished:
            return  # a finished task stays as it finished
        self.state, self.status_message, self.timestamp = state, message, now_iso()
        if message is not None and remember:
            self.remember(message)
        self._emit({"statusUpdate": {**self._ids(), "status": self.snapshot()["status"]}})

    def add_artifact(self, artifact: dict[str, Any], *, append: bool, last: bool) -> None:
        kept = next((a for a in self.artifacts if a["artifactId"] == artifact["artifactId"]), None)
        if kept is None:
            self.artifacts.append(dict(artifact, parts=list(artifact["parts"])))
        elif append:
            kept["parts"].extend(artifact["parts"])
        else:
            kept["parts"] = list(artifact["parts"])
        update = {**self._ids(), "artifact": artifact, "append": append, "lastChunk": last}
        self._emit({"artifactUpdate": update})

    def _ids(self) -> dict[str, Any]:
        return {"taskId": self.id, "contextId": self.context_id}

    def _emit(self, event: dict[str, Any]) -> None:
        self.last_event += 1
        self.events.append((self.last_event, event))
        del self.events[:-MAX_EVENTS]
        self._changed.set()
        self._changed = anyio.Event()

    # -- reading it ----------------------------------------------------------------------

    def events_after(self, cursor: int) -> Iterator[tuple[int, dict[str, Any]]]:
        return ((n, e) for n, e in self.events if n > cursor)

    @property
    def changed(self) -> anyio.Event:
        """Set at the next event (take it before reading the log, then wait on it)."""
        return self._changed

    @property
    def oldest_event(self) -> int:
        """The number of the oldest event still kept (the next one's if none is)."""
        return self.events[0][0] if self.events else self.last_event + 1


class TaskStore:
    """The tasks of every client, bounded (see the module docstring)."""

    def __init__(self, *, max_tasks: int = 10_000, max_per_owner: int = 1_000) -> None:
        self.max_tasks = max_tasks
        self.max_per_owner = max_per_owner
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        #: Each owner's tasks, oldest first: bounds are checked without a scan of all.
        self._owned: dict[str, OrderedDict[str, Task]] = {}
        self._count = 0

    def __len__(self) -> int:
        return len(self._tasks)

    def create(self, agent: str, owner: str, context_id: str | None) -> Task:
        self._make_room(owner)
        self._count += 1
        task = Task(new_id(), context_id or new_id(), agent, owner, self._count)
        self._tasks[task.id] = task
        self._owned.setdefault(owner, OrderedDict())[task.id] = task
        return task

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
        del self._tasks[oldest.id]
        owned = self._owned[oldest.owner]
        del owned[oldest.id]
        if not owned:
            del self._owned[oldest.owner]
