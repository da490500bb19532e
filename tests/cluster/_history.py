"""Histories of rooms across real daemons: the stream as NATS holds it, what observers saw,
the invariants a room's record keeps whatever fault hit it, and a NATS cut we control.

:func:`check_history` is the one checker: every scenario reads the room's whole
stream (:func:`read_stream`) and every observer's view (:func:`watch_until_stopped`)
and hands them to it.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from mesh.cluster import ClusterSettings
from mesh.cluster._bridge import open_nats_loop
from mesh.cluster._link import StreamEvent, open_nats_link
from mesh.cluster._rooms import LEASE, WRITER
from mesh.cluster._settings import Names
from mesh.rooms import (
    MessageEvent,
    ResumedEvent,
    RoomEvent,
    StoppedEvent,
    WelcomeEvent,
    decode_event,
)
from mesh.testing import Daemon, spawn_daemon
from transports import TransportClosed

#: Every wait on the daemons is bounded by this (processes on a loaded machine).
GUARD = 45.0
#: The rooms' lease TTL in these histories: a cut-off holder loses its rooms after it.
LEASE_TTL = 2.0


# -- the record and the views ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recorded:
    """One event of a room as the stream holds it, with who wrote it under which lease."""

    sequence: int
    writer: str
    token: str
    event: RoomEvent


async def read_stream(nats_url: str, room_id: str, cluster: str = "mesh") -> list[Recorded]:
    """Every event the rooms stream holds for ``room_id``, in order, with its headers."""
    names = Names(cluster, "reader")
    subject = names.room_subject(room_id)
    settings = ClusterSettings(nats=nats_url, daemon_id="reader")
    send, receive = anyio.create_memory_object_stream[StreamEvent](1 << 12)
    found: list[StreamEvent] = []
    with anyio.fail_after(GUARD):
        async with open_nats_loop() as loop, open_nats_link(settings, loop) as link, send, receive:
            last = await link.last_message(names.rooms_stream, subject)
            if last is None:
                return []
            watch = await link.consume(names.rooms_stream, subject, 1, send.send_nowait)
            try:
                async for message in receive:
                    found.append(message)
                    if message.sequence >= last.sequence:
                        break
            finally:
                await watch.stop()
    return [
        Recorded(
            m.sequence, m.headers.get(WRITER, ""), m.headers.get(LEASE, ""), decode_event(m.data)
        )
        for m in found
    ]


class View:
    """What one observer on one daemon was shown of a room, as it grows."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.events: list[RoomEvent] = []
        self.closed: str | None = None  # why the daemon closed the observer before the end
        self._changed = anyio.Event()

    def add(self, event: RoomEvent) -> None:
        self.events.append(event)
        self._signal()

    def close(self, why: str) -> None:
        self.closed = why
        self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[RoomEvent], bool]) -> RoomEvent:
        """Until an event shown so far satisfies ``predicate``; that event."""
        with anyio.fail_after(GUARD):
            seen = 0
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                assert self.closed is None, f"the observer on {self.where} was cut: {self.closed}"
                await self._changed.wait()

    async def wait_stopped(self) -> None:
        await self.wait_for(_final)


async def observe(
    daemon: Daemon, where: str, room_id: str, *, task_status: anyio.abc.TaskStatus[View]
) -> None:
    """An observer on ``daemon`` until the room's final stop (started once it is attached)."""
    view = View(where)
    with anyio.fail_after(GUARD * 2):
        async with daemon.open_events(f"/rooms/{room_id}/events") as watch:
            task_status.started(view)
            while not view.events or not _final(view.events[-1]):
                try:
                    received = await watch.receive()
                except TransportClosed as exc:  # the daemon went away
                    view.close(str(exc))
                    return
                view.add(decode_event(received))


def _final(event: RoomEvent) -> bool:
    return isinstance(event, StoppedEvent) and event.reason != "PAUSED"


def check_history(stream: Sequence[Recorded], views: Sequence[View]) -> None:
    """The invariants of a room's record, whatever happened to its daemons.

    Each turn once and one text per turn (no turn lost, none twice); ``seq``
    contiguous from 1; the writer (daemon and lease) changes only where a daemon
    took the room over (its ``RESUMED``), and fencing tokens never go back; one final
    stop, last; every observer's view a prefix of the stream.
    """
    events = [r.event for r in stream]
    assert events, "the stream holds nothing for the room"
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(events) + 1)), f"seq not contiguous: {seqs}"
    assert isinstance(events[0], WelcomeEvent)
    turns = [e.turn for e in events if isinstance(e, MessageEvent)]  # an interjection too
    assert turns == list(range(1, len(turns) + 1)), f"turns lost or twice: {turns}{_show(stream)}"
    for before, after in itertools.pairwise(stream):
        if (before.writer, before.token) != (after.writer, after.token):
            assert isinstance(after.event, ResumedEvent), (
                f"the writer changed from {before.writer}/{before.token} to "
                f"{after.writer}/{after.token} at seq {after.event.seq} "
                f"({type(after.event).__name__}), not at a take-over"
            )
            assert int(after.token) > int(before.token), "a fencing token went back"
    finals = [i for i, e in enumerate(events) if _final(e)]
    assert finals == [len(events) - 1], f"final stops at {finals} of {len(events)} events"
    for view in views:
        assert view.events == events[: len(view.events)], (
            f"the observer on {view.where} saw what the stream does not hold: "
            f"{_diff(view.events, events)}"
        )


def _diff(view: Sequence[RoomEvent], events: Sequence[RoomEvent]) -> str:
    for index, shown in enumerate(view):
        if index >= len(events) or shown != events[index]:
            held = events[index] if index < len(events) else None
            return f"at seq {index + 1}: shown {shown!r}, recorded {held!r}"
    return "nothing"


# -- daemons and the NATS cut -----------------------------------------------------------------


def persona_manifest(path: Path, agent_id: str, *, delay: float = 0.2) -> str:
    """A scripted persona that beats every second (offline 3 s after its daemon is gone)."""
    return f'''id = "{agent_id}"
name = "{agent_id.title()}"
capabilities = ["chat"]
heartbeat_interval = 1.0
heartbeat_ttl = 3.0

[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.persona", "--manifest", "{path}", "--stdio"]

[persona]
system_prompt = "You are {agent_id.title()}."
role = "participant"

[persona.provider]
provider = "scripted"
script = ["{agent_id} speaks at turn {{turn}}"]
delay = {delay}
'''


@asynccontextmanager
async def open_daemons(
    tmp_path: Path,
    nats_urls: Mapping[str, str],
    agents: Mapping[str, Sequence[str]] = {},
    files: Mapping[str, Mapping[str, str]] = {},
) -> AsyncIterator[dict[str, Daemon]]:
    """One ``mesh serve --nats`` per key of ``nats_urls`` (daemon id -> the NATS it dials),
    each holding the scripted personas ``agents`` names for it and the manifests of
    ``files`` (daemon id -> file name -> text)."""
    daemons: dict[str, Daemon] = {}
    async with AsyncExitStack() as stack:
        for daemon_id, url in nats_urls.items():
            directory = tmp_path / daemon_id / "manifests"
            directory.mkdir(parents=True)
            for agent_id in agents.get(daemon_id, ()):
                path = directory / f"{agent_id}.toml"
                path.write_text(persona_manifest(path, agent_id))
            for name, text in files.get(daemon_id, {}).items():
                (directory / name).write_text(text)
            args = ["--nats", url, "--daemon-id", daemon_id, "--room-lease-ttl", f"{LEASE_TTL:g}"]
            args += ["--data-dir", str(tmp_path / daemon_id / "data")]
            daemons[daemon_id] = await stack.enter_async_context(
                spawn_daemon(directory, extra_args=args)
            )
        yield daemons


@dataclass(slots=True)
class NatsCut:
    """A TCP proxy on loopback in front of NATS: :meth:`cut` severs every connection through
    it and closes each new one at once, until :meth:`heal`."""

    upstream_port: int
    port: int = 0
    severed: bool = False
    _pipes: set[anyio.CancelScope] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self.severed = True
        for scope in self._pipes:
            scope.cancel()

    def heal(self) -> None:
        self.severed = False

    async def pipe(self, client: anyio.abc.SocketStream) -> None:
        async with client:
            if self.severed:
                return
            with anyio.CancelScope() as scope:
                self._pipes.add(scope)
                try:
                    async with (
                        await anyio.connect_tcp("127.0.0.1", self.upstream_port) as server,
                        anyio.create_task_group() as tg,
                    ):
                        tg.start_soon(_copy, client, server, scope)
                        tg.start_soon(_copy, server, client, scope)
                finally:
                    self._pipes.discard(scope)


@asynccontextmanager
async def open_nats_cut(upstream_port: int) -> AsyncIterator[NatsCut]:
    """A :class:`NatsCut` in front of the NATS server on ``upstream_port``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    proxy = NatsCut(upstream_port, port=listener.extra(anyio.abc.SocketAttribute.local_port))
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.pipe)
        try:
            yield proxy
        finally:
            tg.cancel_scope.cancel()


async def _copy(
    source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream, scope: anyio.CancelScope
) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass
    scope.cancel()


def _show(stream: Sequence[Recorded]) -> str:
    lines = [f"{r.sequence} {r.writer}/{r.token} {r.event!r}" for r in stream]
    return "\n" + "\n".join(lines)
