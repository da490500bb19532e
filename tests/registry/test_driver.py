"""run_expiry drives the table on a real clock, on both backends."""

from __future__ import annotations

from functools import partial

import anyio
import pytest

from registry import AgentStatus, Registry, StatusChange, run_expiry

from ._helpers import record

pytestmark = pytest.mark.anyio

# The intervals below are tens of milliseconds; the guard only bounds a hang.
GUARD = 10


async def _statuses_until_removed(registry: Registry, agent: str) -> list[AgentStatus]:
    seen: list[AgentStatus] = []
    async with registry.subscribe() as events:
        registry.register(
            record(agent, heartbeat_interval=0.02, heartbeat_ttl=0.04, grace=0.02),
            anyio.current_time(),
        )
        async for change in events:
            if change.agent_id == agent:
                seen.append(change.new)
                if change.new is AgentStatus.REMOVED:
                    return seen
    raise AssertionError("subscription ended early")


async def test_driver_expires_an_agent_through_every_status() -> None:
    registry = Registry()
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:
            await tg.start(run_expiry, registry)
            statuses = await _statuses_until_removed(registry, "quick")
            tg.cancel_scope.cancel()
    assert statuses == [
        AgentStatus.ONLINE,
        AgentStatus.STALE,
        AgentStatus.OFFLINE,
        AgentStatus.REMOVED,
    ]
    assert len(registry) == 0


async def test_driver_wakes_early_for_an_earlier_deadline() -> None:
    registry = Registry()
    # Registered first, so the driver goes to sleep for an hour on its deadline.
    registry.register(record("slow", heartbeat_interval=3600), anyio.current_time())
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:
            await tg.start(run_expiry, registry)
            await anyio.lowlevel.checkpoint()
            statuses = await _statuses_until_removed(registry, "quick")
            tg.cancel_scope.cancel()
    assert statuses[-1] is AgentStatus.REMOVED
    assert [r.id for r in registry.list()] == ["slow"]


async def test_driver_with_a_custom_clock_and_nothing_to_do_waits_for_work() -> None:
    registry = Registry()
    fake_now = 100.0
    changes: list[StatusChange] = []
    removed = anyio.Event()

    def on_change(change: StatusChange) -> None:
        changes.append(change)
        if change.new is AgentStatus.REMOVED:
            removed.set()

    registry.add_listener(on_change)
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:
            await tg.start(partial(run_expiry, registry, clock=lambda: fake_now))
            # The empty table has no deadline: the driver sleeps until woken.
            # This agent's whole life is already over on the fake clock.
            registry.register(
                record("old", heartbeat_interval=1, heartbeat_ttl=1, grace=0), fake_now - 10
            )
            await removed.wait()
            tg.cancel_scope.cancel()
    assert [c.new for c in changes] == [
        AgentStatus.ONLINE,
        AgentStatus.STALE,
        AgentStatus.OFFLINE,
        AgentStatus.REMOVED,
    ]
    assert registry.statistics().expire_calls >= 2


async def test_driver_unregisters_its_wakeup_when_cancelled() -> None:
    registry = Registry()
    async with anyio.create_task_group() as tg:
        await tg.start(run_expiry, registry)
        assert registry.statistics().deadline_watchers == 1
        tg.cancel_scope.cancel()
    # No driver left: registering must not try to wake anything.
    assert registry.statistics().deadline_watchers == 0
    registry.register(record("a"), 0.0)
