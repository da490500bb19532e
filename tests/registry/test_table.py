"""The pure table: transitions, events, lookups and errors, with explicit times."""

from __future__ import annotations

import pytest

from registry import (
    AgentId,
    AgentRecord,
    AgentStatus,
    ChangeKind,
    InvalidAgentRecord,
    Registry,
    StatusChange,
    UnknownAgent,
)

from ._helpers import record, summary

ONLINE, STALE, OFFLINE, REMOVED = (
    AgentStatus.ONLINE,
    AgentStatus.STALE,
    AgentStatus.OFFLINE,
    AgentStatus.REMOVED,
)


@pytest.fixture
def events() -> list[StatusChange]:
    return []


@pytest.fixture
def table(events: list[StatusChange]) -> Registry:
    registry = Registry()
    registry.add_listener(events.append)
    return registry


def test_record_defaults_resolve_ttl_from_interval() -> None:
    assert record("a").heartbeat_ttl == 30.0
    assert record("a", heartbeat_interval=2).heartbeat_ttl == 6.0
    assert record("a", heartbeat_interval=2, heartbeat_ttl=5).heartbeat_ttl == 5.0
    assert record("a").grace == 60.0


def test_record_coerces_capabilities_to_frozenset() -> None:
    caps: list[str] = ["echo", "sum"]
    assert record("a", capabilities=caps).capabilities == frozenset({"echo", "sum"})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"heartbeat_interval": 0}, "heartbeat_interval must be a finite number of seconds > 0"),
        ({"heartbeat_interval": float("nan")}, "heartbeat_interval must be"),
        (
            {"heartbeat_interval": 10, "heartbeat_ttl": 5},
            "heartbeat_ttl (5 s) must be at least its heartbeat_interval",
        ),
        ({"heartbeat_ttl": float("inf")}, "heartbeat_ttl must be"),
        ({"grace": -1}, "grace must be"),
    ],
)
def test_record_rejects_bad_timing(fields: dict[str, float], message: str) -> None:
    with pytest.raises(InvalidAgentRecord, match="agent 'a'") as info:
        record("a", **fields)
    assert message in str(info.value)


def test_record_rejects_empty_id() -> None:
    with pytest.raises(InvalidAgentRecord, match="non-empty"):
        record("")


def test_register_stamps_record_and_publishes(table: Registry, events: list[StatusChange]) -> None:
    stored = table.register(record("a", capabilities=frozenset({"echo"})), now=5.0)
    assert (stored.registered_at, stored.last_seen, stored.status) == (5.0, 5.0, ONLINE)
    assert table.get(AgentId("a")) == stored
    assert summary(events) == [("registered", "a", None, "online", 5.0)]
    assert events[0].record == stored
    assert len(table) == 1
    assert AgentId("a") in table


def test_ids_are_every_agent_s_in_registration_order_and_a_copy(table: Registry) -> None:
    for agent_id in ("b", "c", "a"):
        table.register(record(agent_id), now=1.0)
    table.register(record("c"), now=2.0)  # registered again: it keeps its place
    table.deregister(AgentId("b"), now=3.0)
    ids = table.ids()
    assert ids == ["c", "a"]
    ids.clear()
    assert table.ids() == ["c", "a"]


def test_register_from_mapping(table: Registry) -> None:
    stored = table.register(
        {
            "id": "a",
            "name": "A",
            "transport": "http",
            "capabilities": ["x"],
            "heartbeat_interval": 2,
        },
        now=0.0,
    )
    assert stored.transport == "http"
    assert stored.capabilities == frozenset({"x"})
    assert stored.heartbeat_ttl == 6.0


def test_register_from_bad_mapping_names_the_field(table: Registry) -> None:
    with pytest.raises(InvalidAgentRecord, match=r"'a'.*\$\.name") as info:
        table.register({"id": "a", "name": 3}, now=0.0)
    assert info.value.__cause__ is not None
    with pytest.raises(InvalidAgentRecord, match="interval must be"):
        table.register({"id": "b", "name": "B", "heartbeat_interval": -1}, now=0.0)
    assert len(table) == 0


def test_full_life_online_stale_offline_removed(
    table: Registry, events: list[StatusChange]
) -> None:
    table.register(record("a", heartbeat_interval=10, heartbeat_ttl=30, grace=60), now=0.0)
    events.clear()
    assert table.expire(9.9) == []
    stale = table.expire(10.0)
    assert summary(stale) == [("stale", "a", "online", "stale", 10.0)]
    assert stale[0].record.status is STALE
    assert table.expire(29.9) == []
    offline = table.expire(30.0)
    assert summary(offline) == [("offline", "a", "stale", "offline", 30.0)]
    assert table.get(AgentId("a")) is not None
    assert table.expire(89.9) == []
    removed = table.expire(90.0)
    assert summary(removed) == [("removed", "a", "offline", "removed", 90.0)]
    assert removed[0].record.status is REMOVED
    assert table.get(AgentId("a")) is None
    assert len(table) == 0
    assert events == stale + offline + removed  # listeners saw what expire returned
    assert table.next_deadline() is None


def test_one_late_expire_reports_every_step_in_time_order(table: Registry) -> None:
    table.register(record("a", heartbeat_interval=10, heartbeat_ttl=30, grace=60), now=0.0)
    table.register(record("b", heartbeat_interval=1, heartbeat_ttl=2, grace=1), now=0.0)
    changes = table.expire(1000.0)
    assert summary(changes) == [
        ("stale", "b", "online", "stale", 1.0),
        ("offline", "b", "stale", "offline", 2.0),
        ("removed", "b", "offline", "removed", 3.0),
        ("stale", "a", "online", "stale", 10.0),
        ("offline", "a", "stale", "offline", 30.0),
        ("removed", "a", "offline", "removed", 90.0),
    ]


def test_ttl_equal_to_interval_goes_stale_and_offline_together(table: Registry) -> None:
    table.register(record("a", heartbeat_interval=5, heartbeat_ttl=5), now=0.0)
    assert [c.new for c in table.expire(5.0)] == [STALE, OFFLINE]


def test_zero_grace_removes_at_the_ttl(table: Registry) -> None:
    table.register(record("a", heartbeat_interval=5, heartbeat_ttl=10, grace=0), now=0.0)
    assert [c.new for c in table.expire(10.0)] == [STALE, OFFLINE, REMOVED]


def test_heartbeat_postpones_expiry(table: Registry) -> None:
    table.register(record("a", heartbeat_interval=10), now=0.0)
    table.heartbeat(AgentId("a"), now=8.0)
    assert table.expire(17.9) == []
    assert table.get(AgentId("a")) == table.list()[0]
    assert table.list()[0].last_seen == 8.0
    assert summary(table.expire(18.0)) == [("stale", "a", "online", "stale", 18.0)]


def test_heartbeat_from_the_past_does_not_move_last_seen_back(table: Registry) -> None:
    table.register(record("a", heartbeat_interval=10), now=5.0)
    table.heartbeat(AgentId("a"), now=1.0)
    assert table.list()[0].last_seen == 5.0
    assert table.expire(14.9) == []


@pytest.mark.parametrize("until", [10.0, 30.0], ids=["stale", "offline"])
def test_heartbeat_revives(table: Registry, events: list[StatusChange], until: float) -> None:
    table.register(record("a", heartbeat_interval=10, heartbeat_ttl=30), now=0.0)
    table.expire(until)
    old = table.list()[0].status
    assert old is not ONLINE
    events.clear()
    table.heartbeat(AgentId("a"), now=until + 1)
    assert summary(events) == [("online", "a", old, "online", until + 1)]
    assert events[0].record.status is ONLINE
    assert table.find(status=ONLINE) == [events[0].record]
    # The revived agent runs on its new deadline, not on the old STALE/OFFLINE one.
    assert table.next_deadline() == until + 11
    assert table.expire(until + 10.9) == []
    assert [c.new for c in table.expire(until + 11)] == [STALE]


def test_heartbeat_of_an_online_agent_publishes_nothing(
    table: Registry, events: list[StatusChange]
) -> None:
    table.register(record("a"), now=0.0)
    events.clear()
    table.heartbeat(AgentId("a"), now=1.0)
    assert events == []


def test_reregister_updates_record_and_counts_as_heartbeat(
    table: Registry, events: list[StatusChange]
) -> None:
    table.register(record("a", capabilities=frozenset({"old"}), heartbeat_interval=10), now=1.0)
    table.expire(11.0)
    events.clear()
    stored = table.register(
        record("a", name="Renamed", capabilities=frozenset({"new"}), heartbeat_interval=2), now=12.0
    )
    assert summary(events) == [("registered", "a", "stale", "online", 12.0)]
    assert (stored.name, stored.registered_at, stored.last_seen) == ("Renamed", 1.0, 12.0)
    assert stored.heartbeat_interval == 2.0
    assert table.find("old") == []
    assert table.find("new") == [stored]
    assert len(table) == 1
    # The shorter interval takes effect at once (its deadline is earlier than the old one).
    assert summary(table.expire(14.0)) == [("stale", "a", "online", "stale", 14.0)]


def test_reregister_of_an_online_agent_reports_old_status(
    table: Registry, events: list[StatusChange]
) -> None:
    table.register(record("a"), now=0.0)
    table.register(record("a"), now=1.0)
    assert [(c.kind, c.old, c.new) for c in events] == [
        (ChangeKind.REGISTERED, None, ONLINE),
        (ChangeKind.REGISTERED, ONLINE, ONLINE),
    ]


def test_deregister(table: Registry, events: list[StatusChange]) -> None:
    table.register(record("a", capabilities=frozenset({"echo"})), now=0.0)
    table.expire(10.0)
    events.clear()
    final = table.deregister(AgentId("a"), now=11.0)
    assert final.status is REMOVED
    assert summary(events) == [("deregistered", "a", "stale", "removed", 11.0)]
    assert table.get(AgentId("a")) is None
    assert table.find("echo") == []
    assert table.expire(1e9) == []  # its heap item was invalidated, not acted on
    assert table.next_deadline() is None


def test_removed_agent_can_register_again_as_new(
    table: Registry, events: list[StatusChange]
) -> None:
    table.register(record("a", heartbeat_interval=1, heartbeat_ttl=1, grace=0), now=0.0)
    table.expire(1.0)
    events.clear()
    stored = table.register(record("a"), now=2.0)
    assert stored.registered_at == 2.0
    assert events[0].old is None


@pytest.mark.parametrize("operation", ["heartbeat", "deregister"])
def test_unknown_agent_is_a_clear_error(table: Registry, operation: str) -> None:
    with pytest.raises(UnknownAgent, match="unknown agent 'ghost'") as info:
        getattr(table, operation)(AgentId("ghost"), 0.0)
    assert info.value.agent_id == "ghost"
    assert isinstance(info.value, LookupError)


def test_unknown_after_removal(table: Registry) -> None:
    table.register(record("a", heartbeat_interval=1, heartbeat_ttl=1, grace=0), now=0.0)
    table.expire(1.0)
    with pytest.raises(UnknownAgent):
        table.heartbeat(AgentId("a"), now=2.0)


def test_get_of_unknown_is_none(table: Registry) -> None:
    assert table.get(AgentId("nobody")) is None


def test_find_by_capability_and_status(table: Registry) -> None:
    table.register(
        record("a", capabilities=frozenset({"echo", "sum"}), heartbeat_interval=10), now=0.0
    )
    table.register(record("b", capabilities=frozenset({"echo"}), heartbeat_interval=1), now=0.0)
    table.register(record("c", heartbeat_interval=10), now=0.0)
    table.expire(1.0)  # b goes stale

    def ids(records: list[AgentRecord]) -> list[str]:
        return [r.id for r in records]

    assert ids(table.find()) == ["a", "b", "c"]
    assert ids(table.find("echo")) == ["a", "b"]
    assert ids(table.find("sum")) == ["a"]
    assert ids(table.find("nothing")) == []
    assert ids(table.find("echo", status=ONLINE)) == ["a"]
    assert ids(table.find("echo", status=[ONLINE, STALE])) == ["a", "b"]
    assert ids(table.find(status=STALE)) == ["b"]
    assert ids(table.find(status=OFFLINE)) == []
    assert ids(table.list()) == ["a", "b", "c"]


def test_next_deadline(table: Registry) -> None:
    assert table.next_deadline() is None
    table.register(record("a", heartbeat_interval=10), now=0.0)
    table.register(record("b", heartbeat_interval=4), now=0.0)
    assert table.next_deadline() == 4.0
    table.deregister(AgentId("b"), now=1.0)
    assert table.next_deadline() == 10.0  # b's stale item is skipped


def test_statistics_count_statuses(table: Registry) -> None:
    table.register(record("a", heartbeat_interval=1), now=0.0)
    table.register(record("b", heartbeat_interval=1, heartbeat_ttl=2), now=0.0)
    table.register(record("c", heartbeat_interval=10), now=0.0)
    table.heartbeat(AgentId("a"), now=0.5)
    table.expire(2.0)
    stats = table.statistics()
    assert (stats.agents, stats.online, stats.stale, stats.offline) == (3, 1, 1, 1)
    assert stats.heartbeats == 1
    assert stats.registrations == 3
    assert stats.transitions == 3
    assert stats.reschedules == 1  # a beat, so its first deadline was pushed back once
    assert stats.listeners == 1


def test_heartbeat_never_touches_the_heap(table: Registry) -> None:
    for i in range(100):
        table.register(record(f"a{i}"), now=0.0)
    before = table.statistics()
    for i in range(100):
        table.heartbeat(AgentId(f"a{i}"), now=1.0)
    after = table.statistics()
    assert after.heartbeats - before.heartbeats == 100
    assert (after.heap_pushes, after.heap_size) == (before.heap_pushes, before.heap_size)


def test_heap_garbage_is_compacted(table: Registry) -> None:
    table.register(record("a"), now=0.0)
    for i in range(5000):
        table.register(record("a"), now=float(i))  # each leaves an invalidated item
    assert table.statistics().heap_size <= 2 * len(table) + 1024 + 1


def test_a_raising_listener_is_logged_and_does_not_stop_others(table: Registry) -> None:
    from structlog.testing import capture_logs

    seen: list[StatusChange] = []

    def broken(change: StatusChange) -> None:
        raise RuntimeError("boom")

    table.add_listener(broken)
    table.add_listener(seen.append)
    with capture_logs() as logs:
        table.register(record("a"), now=0.0)
    assert [c.agent_id for c in seen] == ["a"]
    assert table.statistics().listener_errors == 1
    assert [entry["event"] for entry in logs] == ["registry.listener_failed"]
    assert logs[0]["agent_id"] == "a"
    table.remove_listener(broken)
    table.remove_listener(broken)  # removing twice is harmless
    table.register(record("b"), now=0.0)
    assert table.statistics().listener_errors == 1


def test_listener_changes_are_delivered_after_the_current_one(table: Registry) -> None:
    order: list[tuple[str, str, str]] = []

    def first(change: StatusChange) -> None:
        order.append(("first", change.kind, change.agent_id))
        if change.agent_id == "a" and change.kind == ChangeKind.REGISTERED:
            table.register(record("b"), now=change.time)

    def second(change: StatusChange) -> None:
        order.append(("second", change.kind, change.agent_id))

    table.add_listener(first)
    table.add_listener(second)
    table.register(record("a"), now=0.0)
    assert order == [
        ("first", "registered", "a"),
        ("second", "registered", "a"),
        ("first", "registered", "b"),
        ("second", "registered", "b"),
    ]


def test_expire_logs_one_summary_line(table: Registry) -> None:
    from structlog.testing import capture_logs

    for i in range(5):
        table.register(record(f"a{i}", heartbeat_interval=1, heartbeat_ttl=2), now=0.0)
    with capture_logs() as logs:
        table.expire(2.0)
    assert logs == [
        {"event": "registry.expired", "log_level": "info", "stale": 5, "offline": 5, "removed": 0}
    ]


def test_records_and_events_encode_to_json() -> None:
    import msgspec

    registry = Registry()
    changes: list[StatusChange] = []
    registry.add_listener(changes.append)
    registry.register(record("a", capabilities=frozenset({"echo"}), metadata={"v": 1}), now=1.0)
    wire = msgspec.json.decode(msgspec.json.encode(changes[0]))
    assert wire["kind"] == "registered"
    assert wire["record"]["capabilities"] == ["echo"]
    assert wire["record"]["status"] == "online"
    assert msgspec.json.decode(msgspec.json.encode(changes[0]), type=StatusChange) == changes[0]


def test_mark_offline_takes_effect_at_once_and_a_beat_revives() -> None:
    from registry import AgentRecord, AgentStatus, ChangeKind, Registry

    registry = Registry()
    seen: list[tuple[str, str]] = []
    registry.add_listener(lambda change: seen.append((str(change.kind), str(change.new))))
    registry.register(
        AgentRecord(id=AgentId("a"), name="A", heartbeat_interval=1.0, grace=5.0), now=0.0
    )
    record = registry.mark_offline(AgentId("a"), now=0.5)
    assert record.status is AgentStatus.OFFLINE
    assert (
        registry.mark_offline(AgentId("a"), now=0.6).status is AgentStatus.OFFLINE
    )  # no second event
    assert seen[-1] == (str(ChangeKind.OFFLINE), str(AgentStatus.OFFLINE))
    assert sum(1 for kind, _ in seen if kind == str(ChangeKind.OFFLINE)) == 1
    registry.heartbeat(AgentId("a"), now=1.0)
    back = registry.get(AgentId("a"))
    assert back is not None and back.status is AgentStatus.ONLINE
    registry.mark_offline(AgentId("a"), now=1.5)
    assert [c.kind for c in registry.expire(1.0 + 3.0 + 5.0)] == [ChangeKind.REMOVED]
