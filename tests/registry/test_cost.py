"""Expiry costs what expires, counted in heap work (statistics), never timed."""

from __future__ import annotations

import pytest

from registry import AgentId, AgentRecord, Registry

#: Many more agents than expire (a thousand times FEW): the counts below do not depend on
#: how many, and each registration is paid again under coverage.
N = 10_000
FEW = 10


@pytest.fixture(scope="module")
def ids() -> list[AgentId]:
    return [AgentId(f"agent-{i}") for i in range(N)]


def _populate(ids: list[AgentId]) -> Registry:
    registry = Registry()
    for i, agent_id in enumerate(ids):
        # The first FEW beat every second; everyone else every ten seconds.
        interval = 1.0 if i < FEW else 10.0
        registry.register(AgentRecord(id=agent_id, name=agent_id, heartbeat_interval=interval), 0.0)
    return registry


def test_expire_pops_only_what_is_due(ids: list[AgentId]) -> None:
    registry = _populate(ids)
    before = registry.statistics()
    changes = registry.expire(2.0)
    after = registry.statistics()
    assert len(changes) == FEW
    assert {c.agent_id for c in changes} == set(ids[:FEW])
    assert after.heap_pops - before.heap_pops == FEW
    assert after.heap_pushes - before.heap_pushes == FEW  # re-scheduled at their TTL
    assert after.stale == FEW
    assert after.online == N - FEW


def test_heartbeats_at_scale_cost_no_heap_work_and_expire_nothing_early(
    ids: list[AgentId],
) -> None:
    registry = _populate(ids)
    before = registry.statistics()
    for agent_id in ids[FEW:]:
        registry.heartbeat(agent_id, 5.0)
    middle = registry.statistics()
    assert middle.heap_pushes == before.heap_pushes
    assert middle.heap_pops == before.heap_pops
    # At 12 s the ten-second agents' old deadlines (10 s) have passed, but they
    # beat at 5 s: each is pushed back once (to 15 s), none changes status.
    changes = registry.expire(12.0)
    after = registry.statistics()
    assert {c.agent_id for c in changes} == set(ids[:FEW])
    assert after.reschedules - middle.reschedules == N - FEW
    assert after.online == N - FEW
    # The next call finds nothing due and does no work at all.
    assert registry.expire(12.5) == []
    assert registry.statistics().heap_pops == after.heap_pops
