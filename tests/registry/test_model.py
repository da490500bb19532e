"""Random operation sequences against a brute-force model of the statuses."""

from __future__ import annotations

from dataclasses import dataclass

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from registry import AgentId, AgentStatus, Registry, StatusChange, UnknownAgent

from ._helpers import record

ONLINE, STALE, OFFLINE, REMOVED = (
    AgentStatus.ONLINE,
    AgentStatus.STALE,
    AgentStatus.OFFLINE,
    AgentStatus.REMOVED,
)
_NEXT = {ONLINE: STALE, STALE: OFFLINE, OFFLINE: REMOVED}

# Half-second steps and whole-second timings keep every sum exact in floating point;
# few ids and short times make revivals, re-registrations and ties common.
ids = st.sampled_from([AgentId(n) for n in "abc"])
seconds = st.integers(min_value=1, max_value=4).map(float)


@dataclass
class ModelAgent:
    interval: float
    ttl: float
    grace: float
    last_seen: float
    status: AgentStatus = ONLINE

    def due(self) -> float:
        if self.status is ONLINE:
            return self.last_seen + self.interval
        if self.status is STALE:
            return self.last_seen + self.ttl
        return self.last_seen + self.ttl + self.grace


class RegistryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.registry = Registry()
        self.events: list[StatusChange] = []
        self.registry.add_listener(self.events.append)
        self.model: dict[AgentId, ModelAgent] = {}
        self.now = 0.0

    @rule(agent_id=ids, interval=seconds, extra=st.integers(0, 2), grace=st.integers(0, 4))
    def register(self, agent_id: AgentId, interval: float, extra: int, grace: int) -> None:
        ttl = interval * (1 + extra)
        self.registry.register(
            record(agent_id, heartbeat_interval=interval, heartbeat_ttl=ttl, grace=grace), self.now
        )
        known = self.model.get(agent_id)
        last_seen = self.now if known is None else max(self.now, known.last_seen)
        self.model[agent_id] = ModelAgent(interval, ttl, float(grace), last_seen)
        assert self.events[-1].new is ONLINE

    @rule(agent_id=ids)
    def heartbeat(self, agent_id: AgentId) -> None:
        agent = self.model.get(agent_id)
        if agent is None:
            try:
                self.registry.heartbeat(agent_id, self.now)
            except UnknownAgent:
                return
            raise AssertionError(f"heartbeat of unknown {agent_id!r} did not raise")
        self.registry.heartbeat(agent_id, self.now)
        agent.last_seen = max(agent.last_seen, self.now)
        agent.status = ONLINE

    @precondition(lambda self: any(a.status is not ONLINE for a in self.model.values()))
    @rule(data=st.data())
    def revive(self, data: st.DataObject) -> None:
        quiet = sorted(i for i, a in self.model.items() if a.status is not ONLINE)
        self.heartbeat(data.draw(st.sampled_from(quiet)))
        assert self.events[-1].kind == "online"

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def deregister(self, data: st.DataObject) -> None:
        agent_id = data.draw(st.sampled_from(sorted(self.model)))
        assert self.registry.deregister(agent_id, self.now).status is REMOVED
        del self.model[agent_id]

    @rule(step=st.integers(min_value=0, max_value=12))
    def advance_and_expire(self, step: int) -> None:
        self.now += step / 2
        got = self.registry.expire(self.now)
        assert [c.time for c in got] == sorted(c.time for c in got)
        assert all(c.time <= self.now for c in got)
        assert sorted((c.time, c.agent_id, c.old, c.new) for c in got) == self._model_expire()

    def _model_expire(self) -> list[tuple[float, AgentId, AgentStatus, AgentStatus]]:
        expected = []
        for agent_id, agent in list(self.model.items()):
            while agent.due() <= self.now:
                at, old = agent.due(), agent.status
                agent.status = _NEXT[old]
                expected.append((at, agent_id, old, agent.status))
                if agent.status is REMOVED:
                    del self.model[agent_id]
                    break
        return sorted(expected)

    @invariant()
    def statuses_agree(self) -> None:
        actual = {r.id: (r.status, r.last_seen) for r in self.registry.list()}
        assert actual == {i: (a.status, a.last_seen) for i, a in self.model.items()}
        stats = self.registry.statistics()
        assert stats.agents == len(self.model)
        assert stats.online + stats.stale + stats.offline == len(self.model)

    @invariant()
    def next_deadline_is_never_late(self) -> None:
        deadline = self.registry.next_deadline()
        if not self.model:
            assert deadline is None
        else:
            assert deadline is not None
            assert deadline <= min(agent.due() for agent in self.model.values())


RegistryMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, database=None
)
TestRegistryModel = RegistryMachine.TestCase
