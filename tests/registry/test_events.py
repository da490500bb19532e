"""Async subscribers on both backends: order, overflow, and cleanup."""

from __future__ import annotations

import anyio
import pytest
from structlog.testing import capture_logs

from registry import (
    AgentId,
    ChangeKind,
    Registry,
    StatusChange,
    SubscriberOverflow,
    Subscription,
)

from ._helpers import record, summary

pytestmark = pytest.mark.anyio

# Generous: these tests only wait for work that is already buffered.
GUARD = 5


def _churn(registry: Registry) -> list[StatusChange]:
    """Changes of every kind, made synchronously; returns what listeners saw."""
    seen: list[StatusChange] = []
    registry.add_listener(seen.append)
    registry.register(record("a", heartbeat_interval=1, heartbeat_ttl=2, grace=1), 0.0)
    registry.register(record("b", heartbeat_interval=5), 0.0)
    registry.expire(1.0)  # a stale
    registry.heartbeat(AgentId("a"), 1.5)  # a online again
    registry.register(record("b", heartbeat_interval=5), 2.0)  # re-register
    registry.expire(10.0)  # a stale, offline, removed; b stale
    registry.deregister(AgentId("b"), 10.0)
    registry.remove_listener(seen.append)
    return seen


async def _take(subscription: Subscription, count: int) -> list[StatusChange]:
    got = []
    with anyio.fail_after(GUARD):
        async for change in subscription:
            got.append(change)
            if len(got) == count:
                break
    return got


async def test_subscriber_receives_every_change_in_order() -> None:
    registry = Registry()
    async with registry.subscribe() as first, registry.subscribe() as second:
        assert registry.statistics().subscribers == 2
        expected = _churn(registry)
        assert {c.kind for c in expected} == set(ChangeKind)
        assert await _take(first, len(expected)) == expected
        assert await _take(second, len(expected)) == expected
    assert registry.statistics().subscribers == 0


async def test_subscriber_waiting_in_receive_is_woken_by_a_sync_publish() -> None:
    registry = Registry()
    got: list[StatusChange] = []
    ready = anyio.Event()

    async def consume() -> None:
        async with registry.subscribe() as events:
            ready.set()
            got.extend(await _take(events, 2))

    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await ready.wait()
            registry.register(record("a"), 0.0)
            await anyio.lowlevel.checkpoint()  # let the consumer block, then publish again
            registry.deregister(AgentId("a"), 1.0)
    assert summary(got) == [
        ("registered", "a", None, "online", 0.0),
        ("deregistered", "a", "online", "removed", 1.0),
    ]


async def test_changes_before_subscribing_are_not_delivered() -> None:
    registry = Registry()
    registry.register(record("early"), 0.0)
    async with registry.subscribe() as events:
        registry.register(record("late"), 0.0)
        assert [c.agent_id for c in await _take(events, 1)] == ["late"]


async def test_slow_subscriber_gets_its_buffer_then_overflow_and_others_carry_on() -> None:
    registry = Registry()
    async with registry.subscribe(max_buffer=3) as slow, registry.subscribe() as healthy:
        with capture_logs() as logs:
            for i in range(5):  # no await: the subscribers cannot keep up
                registry.register(record(f"a{i}"), float(i))
        assert slow.overflowed
        assert [e["event"] for e in logs] == ["registry.subscriber_overflow"]
        stats = registry.statistics()
        assert (stats.subscribers, stats.subscriber_overflows) == (1, 1)

        received = [change.agent_id for change in await _take(slow, 3)]
        with anyio.fail_after(GUARD), pytest.raises(SubscriberOverflow, match="3 events behind"):
            await slow.__anext__()
        assert received == ["a0", "a1", "a2"]  # complete and in order up to the gap

        # The registry was never blocked, and the other subscriber saw everything.
        assert len(registry) == 5
        assert [c.agent_id for c in await _take(healthy, 5)] == [f"a{i}" for i in range(5)]


async def test_a_closed_subscription_is_detached_and_cannot_be_read() -> None:
    registry = Registry()
    async with registry.subscribe() as events:
        pass
    registry.register(record("a"), 0.0)  # publishing with no subscribers is fine
    assert registry.statistics().subscribers == 0
    with anyio.fail_after(GUARD), pytest.raises(anyio.ClosedResourceError):
        await events.__anext__()


async def test_reading_without_async_with_fails_instead_of_hanging() -> None:
    events = Registry().subscribe()
    with pytest.raises(RuntimeError, match="async with"):
        await events.__anext__()


async def test_a_subscription_is_entered_once() -> None:
    events = Registry().subscribe()
    async with events:
        with pytest.raises(RuntimeError, match="only once"):
            await events.__aenter__()


def test_max_buffer_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Registry().subscribe(max_buffer=0)
