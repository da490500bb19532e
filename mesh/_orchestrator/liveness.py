"""Keeping the registry's word about each link true: probes that beat on time, and the
calls of an agent declared offline failed at once.

Each answered ``ping`` probe is a heartbeat. The registry marks an agent stale one
interval after its last beat, so a probe goes out :data:`PROBE_AT` into the interval:
its answer has the rest of it to arrive, and a healthy agent never changes status.
When the registry does declare an agent offline (no beat for its TTL), the calls in
flight on its link fail then, with that reason, rather than at their own deadlines;
the link itself stays up, so an agent that was only frozen comes back on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import anyio
import structlog

from mesh._errors import MeshError
from mesh._orchestrator.view import Link
from registry import AgentId, ChangeKind, Registry, StatusChange

__all__ = ["PROBE_AT", "fail_calls_when_offline", "probe"]

log = structlog.get_logger("mesh.orchestrator")

#: Probes go out this far into an interval after the last beat: the answer then has
#: the other half to arrive before the registry's stale deadline (``last_seen +
#: interval``). A probe sent at the end of the interval lost that race every time, and
#: every watcher saw every healthy agent go stale and come back, every interval.
PROBE_AT: Final = 0.5


async def probe(link: Link, registry: Registry) -> None:
    """Ping ``PROBE_AT`` into each interval; record each answer as a heartbeat.

    Returns once the link is gone. A ping that fails is no beat (the registry's clock
    takes the agent stale, then offline), and the next goes out as soon.
    """
    spec = link.spec
    agent_id = AgentId(spec.id)
    peer = link.peer
    assert peer is not None
    lead = spec.heartbeat_interval * PROBE_AT
    next_probe = anyio.current_time() + lead
    while not peer.closed:
        with anyio.move_on_after(max(0.0, next_probe - anyio.current_time())):
            await peer.wait_closed()
            return
        next_probe = anyio.current_time() + lead
        if not link.connected or registry.get(agent_id) is None:
            continue
        try:
            # A slow answer still counts: it is late, and the agent is stale meanwhile.
            await peer.call("ping", timeout=spec.heartbeat_interval)
        except MeshError:
            continue
        if registry.get(agent_id) is not None:
            now = anyio.current_time()
            registry.heartbeat(agent_id, now)
            next_probe = now + lead


def fail_calls_when_offline(links: Mapping[str, Link], change: StatusChange) -> None:
    """A registry listener: an agent went offline, so the calls it holds fail now."""
    if change.kind is not ChangeKind.OFFLINE:
        return
    link = links.get(change.agent_id)
    if link is None or link.peer is None:
        return
    record = change.record
    silent = max(0.0, change.time - record.last_seen)
    failed = link.peer.fail_pending(
        f"agent {change.agent_id!r} went offline: no heartbeat for {silent:.1f} s "
        f"(heartbeat TTL {record.heartbeat_ttl:g} s)"
    )
    if failed:
        log.warning("mesh.calls_failed_offline", agent=change.agent_id, calls=failed)
