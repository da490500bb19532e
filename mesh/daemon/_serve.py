"""``mesh serve``: the daemon. One port for the HTTP API and for agents dialling in.

It loads ``manifests/`` (a broken manifest is reported and skipped; the others
run), links every agent through a :class:`~mesh.MeshOrchestrator`, and serves
the routes of :data:`~mesh.daemon._routes.ROUTES` (``docs/daemon.md``), every
one but ``GET /health`` behind a token (``docs/security.md``). On first start
it writes an admin token into its data directory and names the file in the
line it prints when it listens.

It binds its port before it starts any agent, so a busy port is a one-line
:class:`ListenError` with nothing to clean up; in a cluster it connects to NATS
before it starts any agent too, so credentials NATS refuses stop it having started
nothing. SIGINT or SIGTERM shuts it down
gracefully: refuse new work with 503 (in a cluster, withdraw its entries and hand
its rooms over meanwhile, still answering), stop accepting, let calls in flight
finish over every link, dial-in ones included (up to ``drain_timeout``; a call
still running then is answered 503), close dial-in agents with 1001, stop the
children, exit 0.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import ssl
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    AsyncExitStack,
    nullcontext,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc

from mesh._logging import get_logger
from mesh._orchestrator.links import links_from_manifests
from mesh._orchestrator.orchestrator import MeshOrchestrator
from mesh._tasks import open_task_group
from mesh.daemon._api import DaemonApi
from mesh.daemon._auth import Identities
from mesh.daemon._dial_in import DialIns
from mesh.daemon._lifecycle import Lifecycle
from mesh.daemon._page import PageFiles, PeopleRoutes
from mesh.daemon._rooms import RoomRoutes
from mesh.daemon._settings import (
    DaemonSettings,
    ListenError,
    SettingsError,
    cluster_settings,
    load_settings,
)
from mesh.daemon._tokens import TokenStore
from mesh.rooms import RoomManager
from transports import (
    HttpRequest,
    HttpServer,
    HttpServerConfig,
    TokenAuthenticator,
    UpgradeHandler,
    open_http_server,
)
from transports._admission import Vouch
from transports._http_server import HttpHandler

__all__ = ["DaemonSettings", "ListenError", "SettingsError", "load_settings", "serve_daemon"]

log = get_logger("mesh.daemon")

#: How often finished rooms are checked against ``room_retention``, at most.
RETENTION_CHECK_INTERVAL: Final = 60.0
#: Requests cut at the drain deadline get this long to have their 503 written.
CUT_ANSWER_TIMEOUT: Final = 2.0


def _identities(settings: DaemonSettings, dial_in_tokens: TokenAuthenticator) -> Identities:
    store = TokenStore(settings.data_dir, max_tokens=settings.max_tokens)
    store.load()
    limit = settings.max_streams_per_identity
    return Identities(store, dial_in_tokens, max_streams_per_identity=limit)


def _ssl_context(settings: DaemonSettings) -> ssl.SSLContext | None:
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(f"cannot load tls_cert / tls_key: {exc}") from None
    return context


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _registry(settings: DaemonSettings) -> Any:
    """In a cluster, a registry that tells the other daemons of heartbeats; else the default."""
    if not settings.nats:
        return None
    from mesh.cluster import ClusterRegistry

    return ClusterRegistry()


def _connect_nats(settings: DaemonSettings) -> AbstractAsyncContextManager[Any]:
    """The cluster's NATS connection when ``--nats`` is set; nothing otherwise.

    Opened before any agent is started: credentials NATS refuses stop a daemon
    that has started nothing.
    """
    if not settings.nats:
        return nullcontext()
    from mesh.cluster._node import connect_nats

    return connect_nats(cluster_settings(settings))


def _join_cluster(
    settings: DaemonSettings, link: Any, orchestrator: MeshOrchestrator, rooms: RoomManager
) -> AbstractAsyncContextManager[Any]:
    """Join the mesh over ``link`` (from :func:`_connect_nats`); nothing when alone.

    Joined before the HTTP server listens, so that no room is created unshared.
    """
    if link is None:
        return nullcontext()
    from mesh.cluster._node import join_cluster

    # The key that signs what this daemon writes to NATS: the mesh knows it by this key.
    key_file = Path(settings.data_dir) / "cluster.key"
    return join_cluster(orchestrator, link, rooms=rooms, key_file=key_file)


def _private_data_dir(directory: Path) -> None:
    """Create the data directory 0700 (transcripts and tokens live there); warn when an
    existing one lets other users in."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        mode = directory.stat().st_mode & 0o777
    except OSError:
        return  # the token and room stores say what is wrong when they open it
    if mode & 0o077:
        log.warning(
            "daemon.data_dir_not_private",
            path=str(directory),
            mode=f"{mode:o}",
            hint=f"other users may read its transcripts: chmod 700 {directory}",
        )


async def serve_daemon(
    settings: DaemonSettings,
    *,
    environ: Mapping[str, str] | None = None,
    handle_signals: bool = True,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> signal.Signals | None:
    """Run the daemon until SIGINT/SIGTERM (or cancellation); returns after a graceful stop,
    with the signal that asked for it (None when ``handle_signals`` is off)."""
    ssl_context = _ssl_context(settings)
    _private_data_dir(Path(settings.data_dir))
    parts = _assemble(settings, environ)
    async with AsyncExitStack() as stack:
        # The port first: a busy port must fail before any agent process is started.
        server = await _listen(
            stack,
            settings,
            parts.api.handle,
            _upgrade_handler(parts),
            _http_config(settings),
            ssl_context,
            parts.identities.vouch,
        )
        # After the port: a daemon that cannot listen leaves no token behind and says one line.
        admin_file = parts.identities.store.ensure_admin()
        cluster, background = await _start_services(stack, settings, parts, server)
        # Caught before the daemon says it listens: a supervisor that signals it the moment
        # it reads that line gets a graceful stop, even when the daemon was started with
        # SIGINT ignored (a background job of a shell), where a signal before the receiver
        # was lost and the daemon ran on.
        signals = stack.enter_context(_stop_signals()) if handle_signals else None
        _announce(server, settings, admin_file, agents=len(parts.orchestrator.linked_agents()))
        task_status.started(server.url)
        stopped_by = await _wait_for_stop(signals)
        with anyio.CancelScope(shield=True):
            await _leave(parts, cluster, server, settings.drain_timeout)
        background.cancel_scope.cancel()
    log.info("daemon.stopped")
    sys.stdout.flush()
    return stopped_by


@dataclass(frozen=True, slots=True)
class _Parts:
    """What the daemon is made of, built before it listens and started after."""

    identities: Identities
    orchestrator: MeshOrchestrator
    rooms: RoomManager
    dial_ins: DialIns
    api: DaemonApi


def _assemble(settings: DaemonSettings, environ: Mapping[str, str] | None) -> _Parts:
    """Build the orchestrator, the rooms and the API from the settings and manifests;
    nothing runs yet."""
    # Logs each broken manifest (invalid, unusable, or a dial-in token unset) and goes on.
    # A mounted server's OAuth grant is kept in the daemon's data dir, where `mesh mcp login`
    # wrote it (docs/mcp.md).
    base = os.environ if environ is None else environ
    named = {**base, "MESH_DATA_DIR": str(settings.data_dir)}
    links = links_from_manifests(settings.manifests, environ=named)
    identities = _identities(settings, links.tokens)
    orchestrator = MeshOrchestrator.from_links(
        links, registry=_registry(settings), max_call_timeout=settings.max_call_timeout
    )
    # In a cluster, rooms are resumed by whichever daemon takes their lease.
    rooms = RoomManager.for_orchestrator(
        orchestrator,
        settings.data_dir,
        resume=not settings.nats,
        person_wait=settings.max_person_wait,
    )
    dial_ins = DialIns(orchestrator.links)
    api = DaemonApi(
        orchestrator,
        RoomRoutes(rooms, settings),
        identities,
        settings,
        dial_in=dial_ins.serve,
        manifest_ids=links.ids,
        more_http={**PageFiles().http_handlers(), **PeopleRoutes(rooms).http_handlers()},
    )
    dial_ins.owners = api.agents.owners
    return _Parts(identities, orchestrator, rooms, dial_ins, api)


def _upgrade_handler(parts: _Parts) -> UpgradeHandler:
    async def upgrade(stream: anyio.abc.ByteStream, request: HttpRequest, trailing: bytes) -> None:
        # /ws is for agents: served as soon as the links exist, so an agent that dials
        # in while the others start is not kept waiting past its own connect timeout.
        # /agents/events and /rooms/{id}/events are for observers, served once the
        # daemon is up.
        if request.path.rstrip("/") == "/ws":
            await parts.orchestrator.wait_linked()
        else:
            await parts.api.lifecycle.wait_serving()
        await parts.api.routes.upgrade(stream, request, trailing)

    return upgrade


def _http_config(settings: DaemonSettings) -> HttpServerConfig:
    return HttpServerConfig(
        max_body_size=settings.max_body_size,
        max_header_size=settings.max_head_size,
        max_connections=settings.max_connections,
        reserved_connections=settings.admin_connections,
        max_unauthenticated_connections=settings.max_unauthenticated_connections,
        max_connections_per_identity=settings.max_connections_per_identity,
        first_byte_timeout=settings.first_byte_timeout,
        head_timeout=settings.head_timeout,
    )


async def _start_services(
    stack: AsyncExitStack, settings: DaemonSettings, parts: _Parts, server: HttpServer
) -> tuple[Any, anyio.abc.TaskGroup]:
    """Start the agents, the rooms, the cluster and the background tasks, then serve;
    returns the cluster (None alone) and the background task group."""
    # NATS first: a daemon that cannot join must exit having spawned no agent.
    link = await stack.enter_async_context(_connect_nats(settings))
    await stack.enter_async_context(parts.orchestrator)
    await stack.enter_async_context(parts.rooms)
    # Joined before serving, so that no room is ever created unshared.
    cluster = await stack.enter_async_context(
        _join_cluster(settings, link, parts.orchestrator, parts.rooms)
    )
    if cluster is not None:
        cluster.daemon_url = server.url  # what the other daemons show for this one
    parts.api.cluster = cluster
    background = await stack.enter_async_context(open_task_group())
    await background.start(parts.api.a2a.serve)  # A2A tasks run here, stopped with it
    parts.api.lifecycle.start_serving()
    if settings.room_retention is not None:
        background.start_soon(_delete_old_rooms, parts.rooms, settings.room_retention)
    return cluster, background


async def _leave(parts: _Parts, cluster: Any, server: HttpServer, drain_timeout: float) -> None:
    # New work is refused with 503 from now on, but the port stays open until the
    # other daemons were told to stop sending us calls: a client then gets an
    # answer, never a reset, and a call routed here meanwhile is still served.
    parts.api.lifecycle.start_draining()
    started = anyio.current_time()
    if cluster is not None:
        await cluster.withdraw(drain_timeout)  # the calls other daemons sent finish first
    left = max(0.0, drain_timeout - (anyio.current_time() - started))
    await _shut_down(server, parts.api.lifecycle, parts.dial_ins, left)


def _announce(
    server: HttpServer, settings: DaemonSettings, admin_file: Path | None, *, agents: int
) -> None:
    """The one line on stdout (where the daemon listens, and where its admin token is),
    then the log's: the same, and a warning if tokens would cross a network in clear."""
    url = server.url
    announcement: dict[str, Any] = {"event": "listening", "http": url, "ws": f"{server.ws_url}/ws"}
    if admin_file is not None:
        announcement["admin_token_file"] = str(admin_file.resolve())
    print(json.dumps(announcement), flush=True)
    if not server.secure and not _loopback(settings.host):
        log.warning(
            "daemon.plaintext_on_network",
            host=settings.host,
            hint="tokens cross the network in clear: give --tls-cert and --tls-key",
        )
    log.info(
        "daemon.listening",
        url=url,
        agents=agents,
        manifests=settings.manifests,
        admin_token_file=str(admin_file) if admin_file else None,
    )


async def _listen(
    stack: AsyncExitStack,
    settings: DaemonSettings,
    handler: HttpHandler,
    upgrade: UpgradeHandler,
    config: HttpServerConfig,
    ssl_context: ssl.SSLContext | None,
    vouch: Vouch,
) -> HttpServer:
    try:
        return await stack.enter_async_context(
            open_http_server(
                handler,
                host=settings.host,
                port=settings.port,
                upgrade_handler=upgrade,
                ssl_context=ssl_context,
                config=config,
                vouch=vouch,
            )
        )
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ListenError(f"cannot listen on {settings.host}:{settings.port}: {why}") from None


def _stop_signals() -> AbstractContextManager[AsyncIterator[int]]:
    return anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)


async def _wait_for_stop(signals: AsyncIterator[int] | None) -> signal.Signals | None:
    if signals is None:
        await anyio.sleep_forever()
        return None  # pragma: no cover (only cancellation ends the sleep)
    async for signum in signals:
        log.info("daemon.stopping", signal=signal.Signals(signum).name)
        return signal.Signals(signum)
    return None  # the receiver never ends by itself


async def _delete_old_rooms(rooms: RoomManager, retention: float) -> None:
    """Delete finished rooms older than ``retention`` seconds, checking now and then."""
    interval = min(RETENTION_CHECK_INTERVAL, max(retention / 4, 0.1))
    while True:
        deleted = await rooms.delete_finished(int(retention * 1000))
        if deleted:
            log.info("daemon.rooms_expired", rooms=deleted, retention=retention)
        await anyio.sleep(interval)


async def _shut_down(
    server: HttpServer, lifecycle: Lifecycle, dial_ins: DialIns, drain_timeout: float
) -> None:
    """Stop taking work, let calls in flight finish over every link, then close the links.

    Dial-in links stay up while calls drain (calls to those agents are answered
    too); a call still running at the deadline is answered 503, not dropped. The
    port stays open while they drain, answering new work 503, and closes after.
    """
    lifecycle.start_draining()
    drained = await server.drain(drain_timeout)
    in_flight = server.active_requests
    log.info("daemon.drained" if drained else "daemon.drain_timeout", in_flight=in_flight)
    if not drained:
        lifecycle.cut(
            f"the daemon shut down before this call finished (drain timeout {drain_timeout:g} s)"
        )
        await server.drain(CUT_ANSWER_TIMEOUT)
    server.stop_accepting()
    await dial_ins.close_all()
    server.close_all()
