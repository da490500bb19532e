"""In-process cluster members for the cluster's tests: an orchestrator and its cluster."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from mesh import EMBEDDER, AgentSpec, MeshOrchestrator
from mesh.cluster import Cluster, ClusterRegistry, ClusterSettings, open_cluster
from mesh.rooms import RoomManager
from registry import AgentId, AgentStatus, Registry

#: A member waits this long for what another member did to reach it (NATS on loopback).
#: Only a guard against a hang, never a measure: on loopback it takes milliseconds, but
#: at a load of 5 on two cores a call, its silent holder and two cancels took over 10 s.
SPREAD_TIMEOUT = 30.0
#: Each member's key, kept for the test's NATS: a member that restarts under its id
#: rejoins with the key the mesh knows it by (as a daemon's data directory keeps it).
_KEYS = Path(tempfile.mkdtemp(prefix="mesh-cluster-keys-"))
# Gone with the test process: every run made one and left it in the system's temporary directory.
atexit.register(shutil.rmtree, _KEYS, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Member:
    mesh: MeshOrchestrator
    cluster: Cluster
    rooms: RoomManager | None


@asynccontextmanager
async def open_member(
    nats_url: str,
    daemon_id: str,
    specs: Iterable[AgentSpec] = (),
    *,
    data_dir: Path | None = None,
    **settings: object,
) -> AsyncIterator[Member]:
    """One daemon's worth of mesh, in this process, joined to the cluster at ``nats_url``.

    With ``data_dir`` it has rooms too (shared with the other members through NATS).
    """
    config = ClusterSettings(nats=nats_url, daemon_id=daemon_id, **settings)  # type: ignore[arg-type]
    async with AsyncExitStack() as stack:
        mesh = await stack.enter_async_context(MeshOrchestrator(specs, registry=ClusterRegistry()))
        rooms = None
        if data_dir is not None:
            manager = RoomManager.for_orchestrator(
                mesh, data_dir / daemon_id, resume=False, creator=EMBEDDER
            )
            rooms = await stack.enter_async_context(manager)
        key_file = _KEYS / f"{nats_url.rpartition(':')[2]}-{daemon_id}.key"
        joined = open_cluster(mesh, config, rooms=rooms, key_file=key_file)
        cluster = await stack.enter_async_context(joined)
        yield Member(mesh, cluster, rooms)


async def wait_status(
    registry: Registry, agent_id: str, *statuses: AgentStatus, gone: bool = False
) -> None:
    """Until the registry holds ``agent_id`` in one of ``statuses`` (or no longer holds it)."""
    wanted = set(statuses) or {AgentStatus.ONLINE}

    def done() -> bool:
        record = registry.get(AgentId(agent_id))
        return record is None if gone else record is not None and record.status in wanted

    with anyio.fail_after(SPREAD_TIMEOUT):
        async with registry.subscribe() as changes:
            if done():
                return
            async for _ in changes:
                if done():
                    return
