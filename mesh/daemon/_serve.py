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
``GET  /``                                the room page (see :mod:`mesh.daemon._page`)
========================================  =============================================

SIGINT or SIGTERM shuts it down gracefully: stop accepting, close dial-in
agents with 1001, let calls in flight finish (up to ``drain_timeout``), stop
the children, exit 0.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.abc
import msgspec
import structlog

from mesh._errors import MeshError
from mesh._orchestrator.orchestrator import MeshOrchestrator
from mesh.daemon._api import DaemonApi
from mesh.daemon._page import PageFiles, PeopleRoutes
from mesh.daemon._rooms import RoomRoutes, observer_room_id
from mesh.rooms import RoomManager
from transports import (
    CloseCode,
    HttpRequest,
    HttpResponse,
    HttpServerConfig,
    WebSocketStream,
    open_http_server,
    websocket_upgrade_handler,
)

__all__ = ["DaemonSettings", "SettingsError", "load_settings", "serve_daemon"]

log = structlog.get_logger("mesh.daemon")

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


class SettingsError(MeshError):
    """A settings file, variable or flag that does not fit; says which and why."""


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
    page, people = PageFiles(), PeopleRoutes(rooms)

    async def handle(request: HttpRequest) -> HttpResponse:
        parts = [p for p in request.path.split("/") if p]
        answer = await page.handle(request, parts) or await people.handle(request, parts)
        return answer or await api.handle(request)

    dial_ins: set[WebSocketStream] = set()

    async def dial_in(stream: WebSocketStream, agent_id: str | None) -> None:
        assert agent_id is not None  # the authenticator named it
        dial_ins.add(stream)
        try:
            await orchestrator.serve_dial_in(stream, agent_id)
        except MeshError as exc:
            log.warning("daemon.dial_in_refused", agent=agent_id, error=str(exc))
            await stream.aclose(CloseCode.FORBIDDEN, str(exc)[:120])
        finally:
            dial_ins.discard(stream)

    dial_in_upgrade = websocket_upgrade_handler(dial_in, authenticator=orchestrator.dial_in_tokens)

    async def watch_agents(stream: WebSocketStream, _: str | None) -> None:
        await api.watch_agents(stream)

    async def observe_room(stream: WebSocketStream, _: str | None) -> None:
        target = stream.request_target
        room_id = observer_room_id(target.split("?", 1)[0]) or ""
        deltas = parse_qs(urlsplit(target).query).get("deltas", [""])[0] in ("1", "true")
        await room_routes.observe(stream, room_id, _since(target), deltas=deltas)

    watch_upgrade = websocket_upgrade_handler(watch_agents, authenticator=None, paths=None)
    observer_upgrade = websocket_upgrade_handler(observe_room, authenticator=None, paths=None)

    async def upgrade(stream: anyio.abc.ByteStream, request: HttpRequest, trailing: bytes) -> None:
        # /ws is for agents (token required); /agents/events and /rooms/{id}/events
        # are for observers.
        if request.path.rstrip("/") == AGENT_EVENTS:
            chosen = watch_upgrade
        elif observer_room_id(request.path):
            chosen = observer_upgrade
        else:
            chosen = dial_in_upgrade
        await chosen(stream, request, trailing)

    http_config = HttpServerConfig(max_body_size=settings.max_body_size)
    async with (
        orchestrator,
        rooms,
        open_http_server(
            handle,
            host=settings.host,
            port=settings.port,
            upgrade_handler=upgrade,
            config=http_config,
        ) as server,
    ):
        announcement = {"event": "listening", "http": server.url, "ws": f"{server.ws_url}/ws"}
        print(json.dumps(announcement), flush=True)
        log.info(
            "daemon.listening",
            url=server.url,
            agents=len(orchestrator.linked_agents()),
            manifests=settings.manifests,
        )
        task_status.started(server.url)
        if handle_signals:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("daemon.stopping", signal=signal.Signals(signum).name)
                    break
        else:
            await anyio.sleep_forever()
        with anyio.CancelScope(shield=True):
            server.stop_accepting()
            for stream in list(dial_ins):
                await stream.aclose(CloseCode.GOING_AWAY, "daemon shutting down")
            drained = await server.drain(settings.drain_timeout)
            log.info(
                "daemon.drained" if drained else "daemon.drain_timeout",
                in_flight=server.active_requests,
            )
            server.close_all()
    log.info("daemon.stopped")
    sys.stdout.flush()


def _since(target: str) -> int:
    """``?since=SEQ`` from an observer's request target (0 if absent or not a number)."""
    values = parse_qs(urlsplit(target).query).get("since")
    try:
        return max(0, int(values[0])) if values else 0
    except ValueError:
        return 0
