"""One daemon's membership of a mesh over NATS: :func:`open_cluster` wires it all.

::

    registry = ClusterRegistry()
    async with (
        MeshOrchestrator(specs, registry=registry) as mesh,
        open_cluster(mesh, ClusterSettings(nats="nats://127.0.0.1:4222")) as cluster,
    ):
        await mesh.call_tool("an-agent-on-another-daemon", "echo", {"message": "hi"})

On every connection to NATS (the first and each after an outage) it makes sure
the buckets and the rooms stream exist, opens the call inbox, takes calls for
its own agents, watches the agents bucket from a fresh snapshot and writes its
own agents again; with rooms, it follows the rooms stream and the leases. In
between, local calls never wait for NATS and remote ones fail at once.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import msgspec

from mesh._backoff import backoff
from mesh._logging import get_logger
from mesh._tasks import open_task_group
from mesh.cluster._bridge import open_nats_loop
from mesh.cluster._calls import RemoteCalls
from mesh.cluster._errors import ClusterError
from mesh.cluster._keydir import KeyDirectory
from mesh.cluster._keys import DaemonKey, Keys
from mesh.cluster._link import NatsLink, open_nats_link
from mesh.cluster._registry import ClusterRegistry, RegistrySync
from mesh.cluster._settings import ClusterSettings, Names

if TYPE_CHECKING:
    from mesh._orchestrator.orchestrator import MeshOrchestrator
    from mesh._orchestrator.table import LinkTable
    from mesh.cluster._rooms import RoomReplication
    from mesh.rooms import RoomManager

__all__ = ["Cluster", "connect_nats", "join_cluster", "open_cluster"]

log = get_logger("mesh.cluster")

#: Withdrawing our entries at a graceful stop is bounded: NATS may be gone.
WITHDRAW_TIMEOUT: Final = 3.0


class Cluster:
    """What :func:`open_cluster` yields: this daemon's view of the mesh's daemons and NATS."""

    def __init__(
        self,
        settings: ClusterSettings,
        link: NatsLink,
        sync: RegistrySync,
        calls: RemoteCalls,
        rooms: RoomReplication | None,
        keys: KeyDirectory,
    ) -> None:
        self.settings = settings
        self.keys = keys
        self.link = link
        self.sync = sync
        self.calls = calls
        self.rooms = rooms

    @property
    def daemon_id(self) -> str:
        return self.settings.daemon_id

    @property
    def daemon_url(self) -> str:
        """Where this daemon's HTTP API answers, as the other daemons are told."""
        return self.sync.daemon_url

    @daemon_url.setter
    def daemon_url(self, url: str) -> None:
        self.sync.daemon_url = url

    def holder(self, agent_id: str) -> str:
        """The daemon that holds ``agent_id`` (this one unless another's entry says so)."""
        return self.sync.holder(agent_id) or self.daemon_id

    async def withdraw(self, drain_timeout: float = 0.0) -> None:
        """A graceful stop's first step: the others stop listing this daemon's agents and
        take its rooms over, while it still answers what they sent before they knew.

        The calls other daemons sent us finish first (up to ``drain_timeout`` s), new
        ones answered "shutting down": their callers drop a call to an agent whose
        entry goes away, so the entries stay until then.
        Call it before the daemon stops taking calls (it keeps listening on NATS until
        it leaves the ``async with``); bounded, since NATS may be gone.
        """
        with anyio.move_on_after(drain_timeout):
            await self.calls.drain()
        with anyio.move_on_after(WITHDRAW_TIMEOUT):
            await self.sync.withdraw()
        if self.rooms is not None:
            with anyio.move_on_after(WITHDRAW_TIMEOUT):
                await self.rooms.release_all()

    def describe(self) -> dict[str, Any]:
        """For ``GET /health``: who we are, NATS, and the daemons we see."""
        daemons = {self.daemon_id: self.daemon_url}
        daemons.update({d: entry.url for d, entry in self.sync.daemons.items()})
        return {
            "id": self.settings.cluster_id,
            "daemon": self.daemon_id,
            "nats": {
                "connected": self.link.connected,
                "server": self.link.server,
                "error": None if self.link.connected else self.link.last_error,
            },
            "daemons": dict(sorted(daemons.items())),
            "remote_agents": len(self.sync.remote),
            "rooms": self.rooms.held() if self.rooms is not None else [],
            "calls_sent": self.calls.calls_sent,
            "calls_served": self.calls.calls_served,
        }


@asynccontextmanager
async def open_cluster(
    orchestrator: MeshOrchestrator,
    settings: ClusterSettings,
    *,
    rooms: RoomManager | None = None,
    key_file: str | os.PathLike[str] | None = None,
) -> AsyncIterator[Cluster]:
    """Join the mesh named by ``settings.cluster_id`` for the ``async with``.

    ``orchestrator.registry`` must be a :class:`ClusterRegistry` (so heartbeats
    reach the other daemons). Waits up to ``settings.connect_timeout`` for NATS
    and the first snapshot of the registry; past that it serves local agents
    and joins when NATS answers. Leaving withdraws this daemon's entries.

    The key in ``key_file`` (made 0600 if there is none) signs what this daemon
    writes to NATS; ``mesh serve`` keeps it in its data directory as ``cluster.key``.
    Without one a key is made for this run alone, and the daemon id is then taken
    in the mesh until the operator removes its key (a fresh id each run is fine).
    """
    _cluster_registry(orchestrator)  # a misuse is said before dialling
    async with (
        connect_nats(settings) as link,
        join_cluster(orchestrator, link, rooms=rooms, key_file=key_file) as cluster,
    ):
        yield cluster


@asynccontextmanager
async def connect_nats(settings: ClusterSettings) -> AsyncIterator[NatsLink]:
    """The daemon's NATS connection for the ``async with``, for :func:`join_cluster`.

    ``mesh serve`` opens it before it starts any agent: NATS refusing the
    credentials (a :class:`ClusterError`) then stops a daemon that started nothing.
    Picks the daemon id when the settings leave it empty (``link.settings`` has it).
    """
    try:
        import nats  # noqa: F401  (the optional extra: say so now, not at the first connect)
    except ImportError:
        raise ClusterError(
            "joining a cluster needs nats-py: pip install 'agent-mesh[cluster]'"
        ) from None
    settings = settings.with_daemon()
    if not settings.credentials:
        log.warning(
            "cluster.nats_without_credentials",
            hint="any client of this NATS can read calls and forge registry entries: "
            "give the daemons NATS users (docs/cluster.md#credentials)",
        )
    async with open_nats_loop() as loop, open_nats_link(settings, loop) as link:
        yield link


def _cluster_registry(orchestrator: MeshOrchestrator) -> ClusterRegistry:
    registry = orchestrator.links.registry
    if not isinstance(registry, ClusterRegistry):
        raise ClusterError(
            "the orchestrator's registry must be a ClusterRegistry so that heartbeats reach the "
            "other daemons: MeshOrchestrator(..., registry=ClusterRegistry())"
        )
    return registry


@asynccontextmanager
async def join_cluster(
    orchestrator: MeshOrchestrator,
    link: NatsLink,
    *,
    rooms: RoomManager | None = None,
    key_file: str | os.PathLike[str] | None = None,
) -> AsyncIterator[Cluster]:
    """:func:`open_cluster` over a link :func:`connect_nats` opened (and closes)."""
    registry = _cluster_registry(orchestrator)
    settings = link.settings
    names = Names(settings.cluster_id, settings.daemon_id)
    key = DaemonKey.generate() if key_file is None else DaemonKey.load_or_create(key_file)
    keys = KeyDirectory(link, names, Keys(names.daemon, key))
    sync = RegistrySync(
        link,
        names,
        registry,
        call_timeout_of=orchestrator.links.call_timeout_of,
        access_of=lambda agent: _access(orchestrator.links, agent),
        signing=keys.keys,
        fetch_key=keys.ensure,
    )
    # Calls from other daemons come in through the door, as every call does.
    calls = RemoteCalls(link, names, sync, registry, orchestrator.door, keys)
    replication = None
    if rooms is not None:
        from mesh.cluster._rooms import RoomReplication

        replication = RoomReplication(link, names, rooms, settings.room_lease_ttl, keys, calls.ask)
        calls.room_holder = replication.lease_holder
        calls.room_control = replication.answer_control
    cluster = Cluster(settings, link, sync, calls, replication, keys)
    async with open_task_group() as tg:
        await tg.start(calls.serve)
        tg.start_soon(sync.run_publisher)
        tg.start_soon(sync.run_key_fetches)
        sync.daemon_url = settings.daemon_url
        tg.start_soon(sync.run_daemon_entry)
        if replication is not None:
            await tg.start(replication.run)
        ready = anyio.Event()
        tg.start_soon(_follow_connection, cluster, ready)
        orchestrator.links.remote = calls
        if link.connected:
            with anyio.move_on_after(settings.connect_timeout):
                await ready.wait()
        log.info("cluster.joined", cluster=settings.cluster_id, daemon=settings.daemon_id)
        try:
            yield cluster
        finally:
            orchestrator.links.remote = None
            with anyio.CancelScope(shield=True), anyio.move_on_after(WITHDRAW_TIMEOUT * 2):
                await _leave(cluster)
            tg.cancel_scope.cancel()


def _access(links: LinkTable, agent_id: str) -> dict[str, Any] | None:
    """A local agent's access section as JSON builtins (None for the defaults)."""
    from mesh.manifests._types import DEFAULT_ACCESS

    access = links.access_of(agent_id)
    return None if access == DEFAULT_ACCESS else msgspec.to_builtins(access)


async def _follow_connection(cluster: Cluster, ready: anyio.Event) -> None:
    """Set everything up on each connection; retry (with backoff) what fails while connected."""
    link = cluster.link
    while True:
        delays = backoff()
        while link.connected:
            try:
                await _on_connected(cluster)
            except (ClusterError, TimeoutError) as exc:
                log.warning("cluster.setup_failed", error=str(exc))
                with anyio.move_on_after(next(delays)):
                    await link.wait_changed()
                continue
            ready.set()
            break
        await link.wait_changed()


async def _on_connected(cluster: Cluster) -> None:
    link, names = cluster.link, cluster.sync._names
    # Our key first, and everyone's before we take a call: every message we send or
    # read is checked against them.
    await cluster.keys.publish()
    await cluster.keys.start_watch()
    await link.ensure_bucket(names.agents_bucket)
    await cluster.calls.open_inbox()
    await cluster.calls.listen()
    await cluster.sync.start_watch()
    cluster.sync.mark_all()
    if cluster.rooms is not None:
        await cluster.rooms.on_connected()
    with anyio.fail_after(link.settings.connect_timeout + 5):
        await cluster.sync.synced.wait()


async def _leave(cluster: Cluster) -> None:
    # Withdrawn first (a no-op if the daemon did it already): a daemon that stopped
    # listening while the others still listed its agents had their calls fail with
    # "does not answer on NATS".
    await cluster.withdraw()
    with anyio.move_on_after(WITHDRAW_TIMEOUT):
        await cluster.calls.stop_listening()
