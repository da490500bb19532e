"""One registry for the whole mesh: each daemon's agents in a KV bucket, mirrored by every daemon.

**Publishing.** Every change of a local agent (registered, revived, stale,
offline, removed) and every heartbeat, at most four per heartbeat interval, is
written to the agents bucket as an :class:`AgentEntry` with a per-key TTL of the
agent's heartbeat TTL. A daemon that dies stops renewing, so its agents expire
from the bucket within their TTL and every watcher sees them go.

**Mirroring.** Every daemon watches the bucket and replays the other daemons'
entries into its own :class:`~registry.Registry`: an entry registers the agent
(its metadata naming the holder), a renewal is a heartbeat, ``offline`` marks it
offline, an expiry or delete deregisters it. The local registry's own clock
then takes a mirrored agent stale and offline exactly as the holder's does when
beats stop arriving, so ``GET /agents``, ``/agents/events``, capability lookups
and rooms see the whole mesh with no code of their own. On every (re)connect
the watch starts from a fresh snapshot and mirrored agents it no longer holds
are dropped, so the registry converges after an outage.

**Signed.** Each entry is sealed with its writer's key (:mod:`mesh.cluster._sealed`)
and mirrored only if the daemon its key names signed it. A new daemon's entry may
arrive before the keys bucket's watch brings its key: the key is read once then,
and that daemon's changes wait for it, in order, instead of being dropped until
the entry is written again.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.abc
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from mesh._logging import get_logger
from mesh.cluster._errors import ClusterError
from mesh.cluster._link import KvChange, NatsLink, Watch
from mesh.cluster._sealed import Roots, Signing, seal, seal_many, unseal
from mesh.cluster._settings import AGENT_PREFIX, DAEMON_PREFIX, Names, agent_key, key_agent
from mesh.cluster._wire import (
    AGENT_ENTRY,
    DAEMON_ENTRY,
    ENCODER,
    AgentEntry,
    DaemonEntry,
    entry_prefix,
)
from mesh.protocol import now_ms
from registry import AgentId, AgentRecord, AgentStatus, ChangeKind, Registry, StatusChange

__all__ = ["HOLDER", "ClusterRegistry", "RegistrySync"]

log = get_logger("mesh.cluster")

#: The metadata key of a mirrored agent that names the daemon holding it.
HOLDER: Final = "mesh.daemon"
#: A beat is relayed if the last write of the agent is this share of its interval old:
#: mirrors hear of it well inside the interval, and a chatty agent costs four writes each.
RELAY_SHARE: Final = 0.25
#: A daemon's own entry expires this long after its last renewal.
DAEMON_TTL: Final = 6.0
#: Daemons whose key is being read before their entries are checked, at most: entries
#: of more unknown daemons at once are checked against the ring as it is (and dropped).
KEY_FETCHES: Final = 1024
_GONE: Final = frozenset({ChangeKind.REMOVED, ChangeKind.DEREGISTERED})


class ClusterRegistry(Registry):
    """A :class:`~registry.Registry` that also tells the cluster of each heartbeat.

    The table is unchanged; heartbeats of an online agent publish no event, so
    this is how the cluster hears them to renew the agent's entry.
    """

    def __init__(self) -> None:
        super().__init__()
        self.on_beat: Callable[[AgentId], None] | None = None

    def heartbeat(self, agent_id: AgentId, now: float) -> None:
        super().heartbeat(agent_id, now)
        if self.on_beat is not None:
            self.on_beat(agent_id)


class RegistrySync:
    """Publishes this daemon's agents and mirrors everyone else's; see the module docstring."""

    def __init__(
        self,
        link: NatsLink,
        names: Names,
        registry: Registry,
        *,
        call_timeout_of: Callable[[str], float | None] = lambda _: None,
        access_of: Callable[[str], dict[str, Any] | None] = lambda _: None,
        signing: Signing | None = None,
        fetch_key: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self._link = link
        #: With it, entries are sealed with our key and others' are taken only with theirs.
        self._signing = signing
        #: The batch roots of others' entries already verified (a signature per batch).
        self._roots = Roots()
        #: Reads a daemon's key the ring does not have yet (its entry may reach us before
        #: the keys bucket's watch brings its key); run by :meth:`run_key_fetches`.
        self._fetch_key = fetch_key
        #: Daemons whose key is being read, and their changes meanwhile, in order.
        self._waiting: dict[str, list[KvChange]] = {}
        self._fetches: MemoryObjectSendStream[str] | None = None  # while they run
        self._names = names
        self._registry = registry
        self._call_timeout_of = call_timeout_of
        self._access_of = access_of
        #: Mirrored agents, and the daemon that holds each.
        self.remote: dict[AgentId, AgentEntry] = {}
        #: Live daemons (from their own entries), by id.
        self.daemons: dict[str, DaemonEntry] = {}
        self._dirty: dict[AgentId, None] = {}
        self._wake = anyio.Event()
        self._last_write: dict[AgentId, float] = {}
        self._published: set[AgentId] = set()
        #: Held while entries are written, and by withdraw(): a put still in flight when
        #: the daemon leaves must land before the deletes, or it writes the entry anew.
        self._writing = anyio.Lock()
        self._withdrawn = False
        self._conflicts: set[AgentId] = set()
        self._applying = False
        self._snapshot: set[tuple[AgentId, str]] | None = None
        #: Every other daemon's entry for each agent (more than one: held twice), and when
        #: it was seen; :attr:`remote` holds the one chosen.
        self._claims: dict[AgentId, dict[str, tuple[AgentEntry, float]]] = {}
        #: When each of our agents was first published (epoch ms): the earliest wins.
        self._registered: dict[AgentId, int] = {}
        self._watch: Watch | None = None
        self.synced = anyio.Event()
        #: Where this daemon's HTTP API answers (in its own entry; set once it listens).
        self.daemon_url = ""
        self._writes = 0
        self._started = now_ms()
        registry.add_listener(self._on_local_change)
        if isinstance(registry, ClusterRegistry):
            registry.on_beat = self._on_beat

    # -- questions ---------------------------------------------------------------------------

    def holder(self, agent_id: str) -> str | None:
        """The daemon that holds a mirrored agent (None for local or unknown agents)."""
        entry = self.remote.get(AgentId(agent_id))
        return None if entry is None else entry.daemon

    def entry(self, agent_id: str) -> AgentEntry | None:
        return self.remote.get(AgentId(agent_id))

    def is_local(self, agent_id: str) -> bool:
        return AgentId(agent_id) in self._registry and AgentId(agent_id) not in self.remote

    def statistics(self) -> dict[str, int]:
        return {
            "remote_agents": len(self.remote),
            "daemons": len(self.daemons),
            "writes": self._writes,
        }

    # -- publishing our own agents -------------------------------------------------------------

    def _on_local_change(self, change: StatusChange) -> None:
        if self._applying:
            return
        agent_id = change.agent_id
        if agent_id in self.remote:
            if change.kind is ChangeKind.REGISTERED and HOLDER not in change.record.metadata:
                del self.remote[agent_id]  # registered here now: ours from this moment
            else:
                if change.kind in _GONE:
                    del self.remote[agent_id]  # expired by our own clock: let it go
                return
        self._mark(agent_id)

    def _on_beat(self, agent_id: AgentId) -> None:
        if agent_id in self.remote:
            return
        record = self._registry.get(agent_id)
        last = self._last_write.get(agent_id)
        if record is None or last is None:
            self._mark(agent_id)
            return
        if anyio.current_time() - last >= record.heartbeat_interval * RELAY_SHARE:
            self._mark(agent_id)

    def _mark(self, agent_id: AgentId) -> None:
        self._dirty[agent_id] = None
        self._wake.set()

    def mark_all(self) -> None:
        """Write every local agent again (after a reconnect: entries may have expired meanwhile)."""
        for record in self._registry.find():
            if record.id not in self.remote:
                self._dirty[record.id] = None
        self._dirty.update(dict.fromkeys(self._published))
        self._wake.set()

    async def run_publisher(self) -> None:
        """Write dirty agents as they come, in batches; kept for later while NATS is away."""
        # Not before the first snapshot: by then our key is in the keys bucket, so no
        # daemon reads an entry of ours it cannot check yet (and drops it as forged).
        await self.synced.wait()
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            if not self._link.connected or not self._dirty:
                continue
            async with self._writing:
                if self._withdrawn:
                    return  # the daemon is leaving: nothing is written after the deletes
                batch, self._dirty = list(self._dirty), {}
                await self._write(batch)

    async def _write(self, batch: list[AgentId]) -> None:
        """One batch of puts and deletes (one flush, acks matched as they come)."""
        writes: list[tuple[str, bytes | None, float]] = []
        written: list[tuple[AgentId, bool]] = []  # (agent, put) in the order of writes
        now = anyio.current_time()
        for agent_id in batch:
            record = self._registry.get(agent_id)
            if record is None or agent_id in self.remote:
                if agent_id in self._published:
                    self._published.discard(agent_id)
                    self._last_write.pop(agent_id, None)
                    self._registered.pop(agent_id, None)
                    writes.append((agent_key(self._names.daemon, agent_id), None, 0.0))
                    written.append((agent_id, False))
                continue
            self._last_write[agent_id] = now
            timeout, access = self._call_timeout_of(agent_id), self._access_of(agent_id)
            registered = self._registered.get(agent_id)
            if registered is None:
                registered = self._registered[agent_id] = now_ms()
            entry = AgentEntry.of(record, self._names.daemon, timeout, access, registered)
            key = agent_key(self._names.daemon, agent_id)
            writes.append((key, ENCODER.encode(entry), _ttl(record)))
            written.append((agent_id, True))
        if not writes:
            return
        writes = self._seal_puts(writes)
        try:
            outcomes = await self._link.kv_write_many(self._names.agents_bucket, writes)
        except ClusterError as exc:
            outcomes = [str(exc)] * len(writes)
        for (agent_id, put), error in zip(written, outcomes, strict=True):
            if error is not None:
                log.info("cluster.publish_failed", agent=agent_id, error=error)
                self._dirty[agent_id] = None  # written again at the next wake or reconnect
            elif put:
                self._published.add(agent_id)
                self._writes += 1

    async def run_daemon_entry(self) -> None:
        """Keep this daemon's own entry alive (who is up, and where its API answers)."""
        key = DAEMON_PREFIX + self._names.daemon
        await self.synced.wait()  # the bucket exists from the first snapshot on
        while True:
            entry = DaemonEntry(id=self._names.daemon, url=self.daemon_url, started=self._started)
            if self._link.connected:
                async with self._writing:
                    if self._withdrawn:
                        return
                    try:
                        value = self._seal(key, ENCODER.encode(entry))
                        await self._link.kv_put(
                            self._names.agents_bucket, key, value, ttl=DAEMON_TTL
                        )
                    except ClusterError as exc:
                        log.info("cluster.daemon_entry_failed", error=str(exc))
            with anyio.move_on_after(DAEMON_TTL / 3):
                await self._link.wait_changed()

    async def withdraw(self) -> None:
        """Delete our entries (a graceful stop): the others see our agents leave at once.

        Writes in flight finish first (their agents are then known to be published),
        and none start after: each would otherwise bring an entry back until its TTL.
        """
        async with self._writing:
            if self._withdrawn:
                return  # withdrawn already (the daemon does it before it stops serving)
            self._withdrawn = True
            if not self._link.connected:
                return
            daemon = self._names.daemon
            keys = [agent_key(daemon, a) for a in self._published] + [DAEMON_PREFIX + daemon]
            self._published.clear()
            try:
                await self._link.kv_write_many(
                    self._names.agents_bucket, [(key, None, 0.0) for key in keys]
                )
            except ClusterError as exc:
                log.debug("cluster.withdraw_failed", error=str(exc))

    # -- mirroring the others ------------------------------------------------------------------

    async def start_watch(self) -> None:
        """(Re)start the watch from a fresh snapshot (on every connect)."""
        if self._watch is not None:
            await self._watch.stop()
        self._snapshot = set()
        for waiting in self._waiting.values():
            waiting.clear()  # the new snapshot brings their entries again
        # Our own entries' echoes are skipped by their first bytes, before they are decoded
        # (or cross to trio).
        own = entry_prefix(self._names.daemon)
        self._watch = await self._link.watch(self._names.agents_bucket, self._on_kv, skip=own)

    def _on_kv(self, change: KvChange | None) -> None:
        if change is None:
            self._end_snapshot()
            return
        where = _where(change.key)  # the key is read once, here
        if not self._wait_for_key(change, where):
            self._dispatch(change, where)

    def _dispatch(self, change: KvChange, where: tuple[str, str] | None) -> None:
        if change.key.startswith(DAEMON_PREFIX):
            self._on_daemon(change)
        elif where is None:
            if change.key.startswith(AGENT_PREFIX):
                log.warning("cluster.bad_agent_key", key=change.key)
        else:
            self._on_agent(change, *where)

    def _wait_for_key(self, change: KvChange, where: tuple[str, str] | None) -> bool:
        """Whether ``change`` waits for its writer's key to be read (it is then applied,
        in order with that daemon's later changes, by :meth:`run_key_fetches`)."""
        if self._fetches is None or self._signing is None or where is None:
            return False
        daemon = where[0]
        if daemon == self._names.daemon:
            return False
        waiting = self._waiting.get(daemon)
        if waiting is not None:
            waiting.append(change)
            return True
        if change.value is None or daemon in self._signing.ring:
            return False
        try:
            self._fetches.send_nowait(daemon)
        except anyio.WouldBlock:
            return False  # too many unknown daemons at once: checked as it is (dropped)
        self._waiting[daemon] = [change]
        return True

    async def run_key_fetches(self) -> None:
        """Read each unknown writer's key once, then apply what it wrote meanwhile."""
        if self._fetch_key is None:
            return
        self._fetches, to_fetch = anyio.create_memory_object_stream[str](KEY_FETCHES)
        try:
            async with self._fetches, to_fetch:
                async for daemon in to_fetch:
                    await self._fetch_key(daemon)  # False: its entries are dropped, logged
                    for change in self._waiting.pop(daemon, []):
                        self._dispatch(change, _where(change.key))
        finally:
            self._fetches = None

    def _end_snapshot(self) -> None:
        seen, self._snapshot = self._snapshot, None
        if seen is not None:
            now = anyio.current_time()
            for agent_id, claims in list(self._claims.items()):
                for daemon in [d for d in claims if (agent_id, d) not in seen]:
                    del claims[daemon]  # gone while we were not watching
                if not claims:
                    del self._claims[agent_id]
            for agent_id in {*self.remote, *self._claims}:
                self._choose(agent_id, now)
        self.synced.set()

    def _seal_puts(
        self, writes: list[tuple[str, bytes | None, float]]
    ) -> list[tuple[str, bytes | None, float]]:
        """The puts among ``writes`` sealed together (one signature per group of them)."""
        if self._signing is None:
            return writes
        puts = [(key, value) for key, value, _ in writes if value is not None]
        sealed = iter(
            seal_many(self._signing.key, self._names.daemon, self._names.agents_bucket, puts)
        )
        return [(k, None if v is None else next(sealed), ttl) for k, v, ttl in writes]

    def _seal(self, key: str, body: bytes) -> bytes:
        if self._signing is None:
            return body
        return seal(self._signing.key, self._names.daemon, self._names.agents_bucket, key, body)

    def _open(self, change: KvChange, daemon: str) -> bytes | None:
        """A change's body if ``daemon`` (the holder its key names) signed it."""
        assert change.value is not None
        if self._signing is None:
            return change.value
        ring, bucket = self._signing.ring, self._names.agents_bucket
        opened = unseal(ring, bucket, change.key, change.value, self._roots)
        if opened is not None and opened.daemon != daemon:
            bucket = self._names.agents_bucket
            log.warning("cluster.forged", claimed=daemon, subject=f"{bucket}/{change.key}")
            return None
        return None if opened is None else opened.body

    def _on_daemon(self, change: KvChange) -> None:
        daemon = change.key.removeprefix(DAEMON_PREFIX)
        if change.value is None:
            self.daemons.pop(daemon, None)
            return
        body = self._open(change, daemon)
        if body is None:
            return
        try:
            entry = DAEMON_ENTRY.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("cluster.bad_daemon_entry", key=change.key, error=str(exc))
            return
        if entry.id == daemon:
            self.daemons[daemon] = entry

    def _on_agent(self, change: KvChange, daemon: str, agent: str) -> None:
        agent_id = AgentId(agent)
        if daemon == self._names.daemon:
            if change.value is None and agent_id in self._published:
                self._mark(agent_id)  # our entry expired (we were cut off): write it again
            return  # our own write, echoed
        if change.value is None:
            self._drop_claim(agent_id, daemon)
            return
        entry = self._decode_entry(change, daemon)
        if entry is None:
            return
        if self._snapshot is not None:
            self._snapshot.add((agent_id, daemon))
        now = anyio.current_time()
        seen = now - min(change.age, entry.heartbeat_ttl) if self._snapshot is not None else now
        self._claims.setdefault(agent_id, {})[daemon] = (entry, seen)
        self._choose(agent_id, now)

    def _decode_entry(self, change: KvChange, daemon: str) -> AgentEntry | None:
        """The entry in a change, if it is one and its key's holder wrote it."""
        body = self._open(change, daemon)
        if body is None:
            return None
        try:
            entry = AGENT_ENTRY.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("cluster.bad_agent_entry", key=change.key, error=str(exc))
            return None
        if entry.daemon != daemon:
            log.warning("cluster.bad_agent_entry", key=change.key, error="names another holder")
            return None
        return entry

    def _drop_claim(self, agent_id: AgentId, daemon: str) -> None:
        claims = self._claims.get(agent_id, {})
        claims.pop(daemon, None)
        if not claims:
            self._claims.pop(agent_id, None)
        current = self.remote.get(agent_id)
        if current is not None and current.daemon == daemon:
            self._choose(agent_id, anyio.current_time())

    def _choose(self, agent_id: AgentId, now: float) -> None:
        """Mirror the holder callers use: the earliest registration (then the lowest daemon
        id), the same on every daemon whatever order their entries arrive in."""
        claims = self._claims.get(agent_id)
        if not claims:
            if agent_id in self.remote:
                self._forget(agent_id)
            return
        ours = agent_id in self._registry and agent_id not in self.remote
        if len(claims) > 1 or ours:
            self._conflict(agent_id, sorted(claims))
        if ours:
            return  # ours: calls here go to the local one
        if len(claims) == 1:
            [(daemon, (entry, seen))] = claims.items()
        else:
            daemon = min(claims, key=lambda d: (claims[d][0].registered, d))
            entry, seen = claims[daemon]
        try:
            self._apply(agent_id, entry, seen, now)
        except ValueError as exc:  # InvalidAgentRecord: intervals no record may have
            log.warning("cluster.bad_agent_entry", agent=agent_id, daemon=daemon, error=str(exc))

    def _apply(self, agent_id: AgentId, entry: AgentEntry, seen: float, now: float) -> None:
        record = self._changed(agent_id, entry)
        self._applying = True
        try:
            if record is not None:
                self._registry.register(record, seen)
            elif entry.status == AgentStatus.ONLINE:
                self._registry.heartbeat(agent_id, seen)
            self.remote[agent_id] = entry
            if entry.status == AgentStatus.OFFLINE:
                self._registry.mark_offline(agent_id, now)
        finally:
            self._applying = False

    def _changed(self, agent_id: AgentId, entry: AgentEntry) -> AgentRecord | None:
        """The record to register for ``entry``; None if the registry holds it already.

        An entry equal to the one mirrored last is a renewal (a holder writes each agent up
        to four times a heartbeat interval): it is a heartbeat, with no record built."""
        if self.remote.get(agent_id) == entry and agent_id in self._registry:
            return None
        record = entry.record({HOLDER: entry.daemon})
        existing = self._registry.get(agent_id)
        return record if existing is None or _differs(existing, record) else None

    def _forget(self, agent_id: AgentId) -> None:
        self._applying = True
        try:
            if agent_id in self._registry:
                self._registry.deregister(agent_id, anyio.current_time())
        finally:
            self._applying = False
            self.remote.pop(agent_id, None)

    def _conflict(self, agent_id: AgentId, others: list[str]) -> None:
        if agent_id not in self._conflicts:
            self._conflicts.add(agent_id)
            log.warning(
                "cluster.agent_held_twice",
                agent=agent_id,
                here=self._names.daemon,
                there=others,
                hint="agent ids are unique across a mesh; calls here go to a local one, "
                "elsewhere to the earliest registered",
            )


def _where(key: str) -> tuple[str, str] | None:
    """The daemon whose key of the agents bucket ``key`` is (the only one that may write it),
    and the agent it holds ("" for the daemon's own entry); None for a key of neither kind."""
    if key.startswith(DAEMON_PREFIX):
        return key.removeprefix(DAEMON_PREFIX), ""
    if key.startswith(AGENT_PREFIX):
        try:
            return key_agent(key)
        except ValueError:
            return None
    return None


def _ttl(record: AgentRecord) -> float:
    """How long the entry outlives its last write: offline ones are kept for the grace."""
    if record.status is AgentStatus.OFFLINE:
        return max(1.0, record.grace)
    # At least one whole interval past the next beat, so a renewal never arrives late.
    return max(record.heartbeat_ttl, math.ceil(record.heartbeat_interval) + 1.0)


def _differs(old: AgentRecord, new: AgentRecord) -> bool:
    fields: tuple[str, ...] = (
        "name",
        "transport",
        "endpoint",
        "capabilities",
        "metadata",
        "heartbeat_interval",
        "heartbeat_ttl",
        "grace",
    )
    return any(getattr(old, name) != getattr(new, name) for name in fields)


def describe_holder(record: AgentRecord, default: str | None) -> str | None:
    """Which daemon holds the agent: the mirror's holder, else this daemon (``default``)."""
    holder: Any = record.metadata.get(HOLDER)
    return str(holder) if holder is not None else default
