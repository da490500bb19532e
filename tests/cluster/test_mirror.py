"""The mirror's own work on each entry it reads, driven with changes as the watch hands them
over (the pure part of :class:`RegistrySync`: no NATS; the bucket's tests are in
test_registry.py)."""

from __future__ import annotations

from typing import cast

import anyio
import pytest

from mesh.cluster._keys import DaemonKey, Keys
from mesh.cluster._kv import KvChange
from mesh.cluster._link import NatsLink
from mesh.cluster._registry import HOLDER, RegistrySync
from mesh.cluster._sealed import seal_many
from mesh.cluster._settings import Names, agent_key
from mesh.cluster._wire import ENCODER, AgentEntry
from registry import AgentId, AgentRecord, AgentStatus, Registry

pytestmark = pytest.mark.anyio

BUCKET = "mesh-mesh-agents"
A = Keys("a", DaemonKey.generate())


def _mirror() -> tuple[RegistrySync, Registry]:
    """Daemon b's mirror, knowing a's key; its link is never used by what is read."""
    keys = Keys("b", DaemonKey.generate())
    keys.ring.add("a", A.key.public)
    registry = Registry()
    link = cast(NatsLink, object())
    return RegistrySync(link, Names("mesh", "b"), registry, signing=keys), registry


def _written(*entries: AgentEntry, revision: int = 1) -> list[KvChange]:
    """``entries`` as daemon a writes them together (one sealed batch), as the watch reads them."""
    puts = [(agent_key("a", entry.id), ENCODER.encode(entry)) for entry in entries]
    values = seal_many(A.key, "a", BUCKET, puts)
    return [
        KvChange(key, value, revision + i, 0.0)
        for i, ((key, _), value) in enumerate(zip(puts, values, strict=True))
    ]


def _entry(agent: str, **fields: object) -> AgentEntry:
    record = AgentRecord(id=AgentId(agent), name=str(fields.pop("name", agent)))
    entry = AgentEntry.of(record, "a", None, None, registered=1)
    return AgentEntry(**{**{f: getattr(entry, f) for f in entry.__struct_fields__}, **fields})


async def test_a_renewal_is_a_heartbeat_with_no_record_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A holder writes each agent up to four times a heartbeat interval: an entry equal
    to the one mirrored last only says the agent lives."""
    sync, registry = _mirror()
    built = 0
    record = AgentEntry.record

    def counted(self: AgentEntry, metadata: dict[str, object]) -> AgentRecord:
        nonlocal built
        built += 1
        return record(self, metadata)

    monkeypatch.setattr(AgentEntry, "record", counted)
    entries = [_entry(f"x{i}") for i in range(3)]
    for change in _written(*entries):
        sync._on_kv(change)
    assert built == 3 and len(registry) == 3
    before = registry.statistics()
    for change in _written(*entries, revision=10):
        sync._on_kv(change)
    after = registry.statistics()
    assert built == 3  # none more: each was a renewal
    assert after.registrations == before.registrations
    assert after.heartbeats == before.heartbeats + 3


async def test_an_entry_that_changed_or_went_offline_is_applied_in_full() -> None:
    sync, registry = _mirror()
    for change in _written(_entry("x"), _entry("y")):
        sync._on_kv(change)
    renamed, offline = _entry("x", name="renamed"), _entry("y", status="offline")
    for change in _written(renamed, offline, revision=10):
        sync._on_kv(change)
    x, y = registry.get(AgentId("x")), registry.get(AgentId("y"))
    assert x is not None and x.name == "renamed" and x.metadata[HOLDER] == "a"
    assert y is not None and y.status is AgentStatus.OFFLINE
    for change in _written(_entry("y"), revision=20):  # online again: revived
        sync._on_kv(change)
    y = registry.get(AgentId("y"))
    assert y is not None and y.status is AgentStatus.ONLINE
    assert sync.holder("x") == sync.holder("y") == "a"


async def test_a_renewal_of_an_agent_this_daemon_expired_registers_it_again() -> None:
    sync, registry = _mirror()
    for change in _written(_entry("x")):
        sync._on_kv(change)
    registry.deregister(AgentId("x"), anyio.current_time())  # as its own clock would
    for change in _written(_entry("x"), revision=10):
        sync._on_kv(change)
    assert AgentId("x") in registry and sync.holder("x") == "a"
