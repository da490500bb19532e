"""``mesh serve``: the daemon. One port for the HTTP API and for agents dialling in.

It loads ``manifests/`` (a broken manifest is reported and skipped; the others
run), links every agent through a :class:`~mesh.MeshOrchestrator`, and serves:

========================================  =============================================
``GET  /health``                          liveness and agent counts
``GET  /agents`` / ``GET /agents/{id}``   the registry
``POST /agents/register``                 an agent joins (with an HTTP endpoint, or none)
``POST /agents/{id}/heartbeat``           an agent says it is alive
``DELETE /agents/{id}``                   an agent leaves
``POST /rpc``                             call an agent through the mesh
``/ws``                                   agents dial in (token from their manifest)
========================================  =============================================

It binds its port before it starts any agent, so a busy port is a one-line
:class:`ListenError` with nothing to clean up. SIGINT or SIGTERM shuts it down
gracefully: stop accepting, let calls in flight finish over every link, dial-in
ones included (up to ``drain_timeout``; a call still running then is answered
503), close dial-in agents with 1001, stop the children, exit 0.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.abc
import msgspec
import structlog

from mesh._errors import MeshError, Unauthorized
from mesh._orchestrator.orchestrator import MeshOrchestrator
from mesh.daemon._api import DaemonApi
from mesh.daemon._lifecycle import Lifecycle
from mesh.daemon._rooms import RoomRoutes, observer_room_id, parse_since
from mesh.rooms import RoomManager
from transports import (
    CloseCode,
    HttpRequest,
    HttpServer,
    HttpServerConfig,
    UpgradeHandler,
    WebSocketConfig,
    WebSocketStream,
    open_http_server,
    websocket_upgrade_handler,
)
from transports._http_server import HttpHandler

__all__ = ["DaemonSettings", "ListenError", "SettingsError", "load_settings", "serve_daemon"]

log = structlog.get_logger("mesh.daemon")

#: Requests cut at the drain deadline get this long to have their 503 written.
CUT_ANSWER_TIMEOUT: Final = 2.0

#: The WebSocket that streams the agent table: a snapshot, then every status change.
AGENT_EVENTS: Final = "/agents/events"

#: Environment variables that set daemon settings (flags win over them, they win over the file).
ENV_SETTINGS: Final = {
    "MESH_HOST": "host",
    "MESH_PORT": "port",
    "MESH_MANIFESTS": "manifests",
    "MESH_DRAIN_TIMEOUT": "drain_timeout",
    "MESH_LOG_LEVEL": "log_level",
    "MESH_LOG_FORMAT": "log_format",
    "MESH_DATA_DIR": "data_dir",
}


class DaemonSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = msgspec.field(default=8700)
    manifests: str = "manifests"
    #: SIGTERM waits this long for calls in flight before stopping anyway.
    drain_timeout: float = 10.0
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    max_body_size: int = 1 << 20
    #: Where rooms keep their transcripts (JSONL per room + SQLite); rooms resume from here.
    data_dir: str = ".mesh"
    #: Every WebSocket the daemon serves (agents, watchers, observers) is pinged this
    #: often, and closed with 1011 if the pong takes longer than ``ping_timeout``.
    ping_interval: Annotated[float, msgspec.Meta(gt=0)] = 20.0
    ping_timeout: Annotated[float, msgspec.Meta(gt=0)] = 20.0


class SettingsError(MeshError):
    """A settings file, variable or flag that does not fit; says which and why."""


class ListenError(MeshError):
    """The daemon cannot listen where it was told to (port in use, no permission, bad host)."""


def load_settings(
    config: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> DaemonSettings:
    """Settings from a TOML file, then ``MESH_*`` variables, then flags (``overrides``)."""
    merged: dict[str, Any] = {}
    source = "defaults"
    if config is not None:
        path = Path(config)
        try:
            merged.update(msgspec.toml.decode(path.read_bytes()))
        except OSError as exc:
            raise SettingsError(f"cannot read settings file {path}: {exc.strerror}") from None
        except msgspec.DecodeError as exc:
            raise SettingsError(f"{path}: {exc}") from None
        source = str(path)
    env = environ if environ is not None else {}
    for variable, name in ENV_SETTINGS.items():
        if variable in env:
            merged[name] = env[variable]
            source = f"{source} + ${variable}"
    merged.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return msgspec.convert(merged, DaemonSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid settings ({source}): {exc}") from None


async def serve_daemon(
    settings: DaemonSettings,
    *,
    environ: Mapping[str, str] | None = None,
    handle_signals: bool = True,
    task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run the daemon until SIGINT/SIGTERM (or cancellation); returns after a graceful stop."""
    # Logs each broken manifest (invalid, unusable, or a dial-in token unset) and goes on.
    orchestrator = MeshOrchestrator.from_manifests(settings.manifests, environ=environ)
    rooms = RoomManager.for_orchestrator(orchestrator, settings.data_dir)
    room_routes = RoomRoutes(rooms)
    api = DaemonApi(orchestrator, room_routes)
    dial_ins: set[WebSocketStream] = set()

    async def dial_in(stream: WebSocketStream, agent_id: str | None) -> None:
        assert agent_id is not None  # the authenticator named it
        dial_ins.add(stream)

        async def refuse(why: str) -> None:  # before the link closes: the code tells it why
            await stream.aclose(CloseCode.FORBIDDEN, why[:120])

        try:
            await orchestrator.serve_dial_in(stream, agent_id, refuse=refuse)
        except Unauthorized as exc:  # closed with 4003 already, by refuse()
            log.warning("daemon.dial_in_refused", agent=agent_id, error=str(exc))
        except MeshError as exc:
            # Not a refusal (its handshake timed out, its link dropped): it may dial
            # again, so no 4003, which would tell it to stop for good.
            log.info("daemon.dial_in_ended", agent=agent_id, error=str(exc))
        finally:
            dial_ins.discard(stream)

    ws_config = WebSocketConfig(
        ping_interval=settings.ping_interval, ping_timeout=settings.ping_timeout
    )
    dial_in_upgrade = websocket_upgrade_handler(
        dial_in, authenticator=orchestrator.dial_in_tokens, config=ws_config
    )

    async def watch_agents(stream: WebSocketStream, _: str | None) -> None:
        await api.watch_agents(stream)

    async def observe_room(stream: WebSocketStream, _: str | None) -> None:
        target = stream.request_target
        room_id = observer_room_id(target.split("?", 1)[0]) or ""
        await room_routes.observe(stream, room_id, _since(target))

    watch_upgrade = websocket_upgrade_handler(
        watch_agents, authenticator=None, paths=None, config=ws_config
    )
    observer_upgrade = websocket_upgrade_handler(
        observe_room, authenticator=None, paths=None, config=ws_config
    )

    async def upgrade(stream: anyio.abc.ByteStream, request: HttpRequest, trailing: bytes) -> None:
        # /ws is for agents (token required): served as soon as the links exist, so an
        # agent that dials in while the others start is not kept waiting past its own
        # connect timeout. /agents/events and /rooms/{id}/events are for observers,
        # served once the daemon is up.
        if request.path.rstrip("/") == AGENT_EVENTS:
            chosen = watch_upgrade
        elif observer_room_id(request.path):
            chosen = observer_upgrade
        else:
            await orchestrator.wait_linked()
            chosen = dial_in_upgrade
        if chosen is not dial_in_upgrade:
            await api.lifecycle.wait_serving()
        await chosen(stream, request, trailing)

    http_config = HttpServerConfig(max_body_size=settings.max_body_size)
    async with AsyncExitStack() as stack:
        # The port first: a busy port must fail before any agent process is started.
        server = await _listen(stack, settings, api.handle, upgrade, http_config)
        await stack.enter_async_context(orchestrator)
        await stack.enter_async_context(rooms)
        api.lifecycle.start_serving()
        announcement = {"event": "listening", "http": server.url, "ws": f"{server.ws_url}/ws"}
        print(json.dumps(announcement), flush=True)
        log.info(
            "daemon.listening",
            url=server.url,
            agents=len(orchestrator.linked_agents()),
            manifests=settings.manifests,
        )
        task_status.started(server.url)
        await _wait_for_stop(handle_signals)
        with anyio.CancelScope(shield=True):
            await _shut_down(server, api.lifecycle, dial_ins, settings.drain_timeout)
    log.info("daemon.stopped")
    sys.stdout.flush()


async def _listen(
    stack: AsyncExitStack,
    settings: DaemonSettings,
    handler: HttpHandler,
    upgrade: UpgradeHandler,
    config: HttpServerConfig,
) -> HttpServer:
    try:
        return await stack.enter_async_context(
            open_http_server(
                handler,
                host=settings.host,
                port=settings.port,
                upgrade_handler=upgrade,
                config=config,
            )
        )
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ListenError(f"cannot listen on {settings.host}:{settings.port}: {why}") from None


async def _wait_for_stop(handle_signals: bool) -> None:
    if not handle_signals:
        await anyio.sleep_forever()
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("daemon.stopping", signal=signal.Signals(signum).name)
            return


async def _shut_down(
    server: HttpServer, lifecycle: Lifecycle, dial_ins: set[WebSocketStream], drain_timeout: float
) -> None:
    """Stop taking work, let calls in flight finish over every link, then close the links.

    Dial-in links stay up while calls drain (calls to those agents are answered
    too); a call still running at the deadline is answered 503, not dropped.
    """
    server.stop_accepting()
    lifecycle.start_draining()
    drained = await server.drain(drain_timeout)
    in_flight = server.active_requests
    log.info("daemon.drained" if drained else "daemon.drain_timeout", in_flight=in_flight)
    if not drained:
        lifecycle.cut(
            f"the daemon shut down before this call finished (drain timeout {drain_timeout:g} s)"
        )
        await server.drain(CUT_ANSWER_TIMEOUT)
    async with anyio.create_task_group() as tg:
        for stream in list(dial_ins):
            tg.start_soon(stream.aclose, CloseCode.GOING_AWAY, "daemon shutting down")
    server.close_all()


def _since(target: str) -> int:
    """``?since=SEQ`` from an observer's request target (0 if absent or not a number)."""
    return parse_since(parse_qs(urlsplit(target).query).get("since", [""])[0]) or 0
