"""The daemon's HTTP API: JSON in, JSON out, and a 4xx that says why for bad input.

Bodies are decoded by msgspec into typed requests, so a wrong field is reported
with its path (``$.heartbeat_interval``). Mesh errors map to statuses: unknown
agent 404, offline or unreachable 503, timeout 504, an error the agent answered
502, too large 413. Nothing here ever returns a stack trace.
"""

from __future__ import annotations

from typing import Any, Final

import anyio
import msgspec
import structlog

from mesh._errors import (
    AgentUnavailable,
    CallTimeout,
    ConnectionLost,
    MeshError,
    MessageTooLarge,
    RemoteError,
)
from mesh._orchestrator.orchestrator import MeshOrchestrator
from mesh._orchestrator.spec import AgentSpec
from mesh.daemon._rooms import RoomRoutes
from registry import AgentId, AgentRecord, InvalidAgentRecord, SubscriberOverflow, UnknownAgent
from transports import (
    CloseCode,
    HttpRequest,
    HttpResponse,
    TransportClosed,
    WebSocketStream,
    open_http_client,
)

__all__ = ["DaemonApi"]

log = structlog.get_logger("mesh.daemon")

_JSON: Final = msgspec.json.Encoder()


class RegisterBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: str = msgspec.field()
    name: str = ""
    endpoint: str | None = None
    transport: str = "http"
    capabilities: list[str] = []
    heartbeat_interval: float = 10.0
    heartbeat_ttl: float = 0.0
    metadata: dict[str, Any] = {}
    #: For the mesh to call the agent's endpoint with (never echoed back or logged).
    token: str | None = None


class BroadcastBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    method: str
    params: Any = None
    capability: str | None = None
    timeout: float = 10.0


class RpcBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    agent: str
    method: str
    params: Any = None
    timeout: float | None = None


def _json(status: int, payload: Any) -> HttpResponse:
    return HttpResponse(status, _JSON.encode(payload))


def _error(status: int, message: str, **extra: Any) -> HttpResponse:
    return _json(status, {"error": {"status": status, "message": message, **extra}})


def describe(record: AgentRecord, now: float, link_error: str | None = None) -> dict[str, Any]:
    """An agent as the API shows it (times as seconds ago: the registry's clock is monotonic)."""
    shown: dict[str, Any] = {
        "id": record.id,
        "name": record.name,
        "transport": record.transport,
        "endpoint": record.endpoint,
        "status": str(record.status),
        "capabilities": sorted(record.capabilities),
        "last_seen_ago": round(max(0.0, now - record.last_seen), 3),
        "registered_ago": round(max(0.0, now - record.registered_at), 3),
        "heartbeat_interval": record.heartbeat_interval,
        "heartbeat_ttl": record.heartbeat_ttl,
    }
    if link_error:
        shown["link_error"] = link_error
    return shown


def mesh_error_status(exc: MeshError) -> int:
    if isinstance(exc, AgentUnavailable):
        return 404 if "no agent" in exc.message else 503
    if isinstance(exc, CallTimeout):
        return 504
    if isinstance(exc, ConnectionLost):
        return 503
    if isinstance(exc, MessageTooLarge):
        return 413
    if isinstance(exc, RemoteError):
        return 502
    return 500


class DaemonApi:
    def __init__(self, orchestrator: MeshOrchestrator, rooms: RoomRoutes | None = None) -> None:
        self._mesh = orchestrator
        self._rooms = rooms
        self._started = anyio.current_time()
        self.calls_in_flight = 0

    async def handle(self, request: HttpRequest) -> HttpResponse:
        parts = [p for p in request.path.split("/") if p]
        route = (request.method, *parts)
        match route:
            case ("GET", "health"):
                return self._health()
            case ("GET", "agents"):
                return self._list()
            case ("POST", "agents", "register"):
                return self._register(request.body)
            case ("GET", "agents", agent_id):
                return self._get(agent_id)
            case ("DELETE", "agents", agent_id):
                return await self._delete(agent_id)
            case ("POST", "agents", agent_id, "heartbeat"):
                return self._heartbeat(agent_id)
            case ("POST", "rpc"):
                return await self._rpc(request.body)
            case ("POST", "broadcast"):
                return await self._broadcast(request.body)
            case (_, "rooms", *_) if self._rooms is not None:
                return await self._rooms.handle(request, parts)
            case (_, "health" | "agents" | "rpc" | "broadcast", *_):
                return _error(405, f"{request.method} is not allowed on {request.path}")
        return _error(404, f"no route {request.method} {request.path}")

    def _health(self) -> HttpResponse:
        stats = self._mesh.registry.statistics()
        return _json(
            200,
            {
                "status": "ok",
                "uptime": round(anyio.current_time() - self._started, 3),
                "calls_in_flight": self.calls_in_flight,
                "agents": {"online": stats.online, "stale": stats.stale, "offline": stats.offline},
            },
        )

    def _list(self) -> HttpResponse:
        return _json(200, {"agents": self._described()})

    def _described(self) -> list[dict[str, Any]]:
        now = anyio.current_time()
        return [describe(r, now, self._mesh.link_error(r.id)) for r in self._mesh.agents()]

    async def watch_agents(self, stream: WebSocketStream) -> None:
        """Send every agent as it is now, then each change of status, until the watcher leaves.

        Subscribed before the snapshot is taken, so no change falls between the two.
        """
        registry = self._mesh.registry
        try:
            async with registry.subscribe() as changes:
                snapshot = {"type": "snapshot", "agents": self._described()}
                await stream.send(msgspec.json.encode(snapshot))
                async for change in changes:
                    link_error = self._mesh.link_error(change.agent_id)
                    shown = describe(change.record, anyio.current_time(), link_error)
                    event = {"type": str(change.kind), "old": change.old, "agent": shown}
                    await stream.send(msgspec.json.encode(event))
        except SubscriberOverflow:
            await stream.aclose(CloseCode.FELL_BEHIND, "fell behind the registry's changes")
        except TransportClosed:
            log.debug("daemon.watcher_left")

    def _get(self, agent_id: str) -> HttpResponse:
        record = self._mesh.registry.get(AgentId(agent_id))
        if record is None:
            return _error(404, f"no agent {agent_id!r} is registered")
        return _json(200, describe(record, anyio.current_time(), self._mesh.link_error(agent_id)))

    def _register(self, body: bytes) -> HttpResponse:
        try:
            spec = msgspec.json.decode(body, type=RegisterBody)
        except msgspec.DecodeError as exc:
            return _error(400, f"invalid registration: {exc}")
        if spec.endpoint is not None and not spec.endpoint.startswith(("http://", "https://")):
            return _error(
                400, "invalid registration: endpoint must be http:// or https:// - at `$.endpoint`"
            )
        known = self._mesh.registry.get(AgentId(spec.id)) is not None
        record = {
            "id": spec.id,
            "name": spec.name or spec.id,
            "transport": spec.transport,
            "endpoint": spec.endpoint,
            "capabilities": spec.capabilities,
            "metadata": spec.metadata,
            "heartbeat_interval": spec.heartbeat_interval,
            "heartbeat_ttl": spec.heartbeat_ttl,
        }
        try:
            stored = self._mesh.registry.register(record, anyio.current_time())
        except (InvalidAgentRecord, msgspec.ValidationError, ValueError) as exc:
            return _error(400, f"invalid registration: {exc}")
        if spec.endpoint is not None and not self._mesh.has_link(spec.id):
            endpoint, token = spec.endpoint, spec.token
            self._mesh.add_agent(
                AgentSpec(
                    spec.id,
                    lambda: open_http_client(endpoint, token=token),
                    name=stored.name,
                    transport="http",
                    endpoint=endpoint,
                    capabilities=stored.capabilities,
                    heartbeat_interval=stored.heartbeat_interval,
                    heartbeat_ttl=stored.heartbeat_ttl,
                )
            )
        return _json(200 if known else 201, describe(stored, anyio.current_time()))

    def _heartbeat(self, agent_id: str) -> HttpResponse:
        try:
            self._mesh.registry.heartbeat(AgentId(agent_id), anyio.current_time())
        except UnknownAgent:
            return _error(404, f"no agent {agent_id!r} is registered; POST /agents/register first")
        record = self._mesh.registry.get(AgentId(agent_id))
        assert record is not None
        return _json(200, {"id": agent_id, "status": str(record.status)})

    async def _delete(self, agent_id: str) -> HttpResponse:
        if self._mesh.registry.get(AgentId(agent_id)) is None:
            return _error(404, f"no agent {agent_id!r} is registered")
        await self._mesh.remove_agent(agent_id)
        return HttpResponse(204)

    async def _rpc(self, body: bytes) -> HttpResponse:
        try:
            call = msgspec.json.decode(body, type=RpcBody)
        except msgspec.DecodeError as exc:
            return _error(400, f"invalid call: {exc}")
        self.calls_in_flight += 1
        try:
            result = await self._mesh.call(
                call.agent, call.method, call.params, timeout=call.timeout
            )
        except MeshError as exc:
            status = mesh_error_status(exc)
            return _error(status, str(exc), code=exc.code, data=exc.data)
        finally:
            self.calls_in_flight -= 1
        return _json(200, {"result": result})

    async def _broadcast(self, body: bytes) -> HttpResponse:
        try:
            cast = msgspec.json.decode(body, type=BroadcastBody)
        except msgspec.DecodeError as exc:
            return _error(400, f"invalid broadcast: {exc}")
        self.calls_in_flight += 1
        try:
            outcomes = await self._mesh.broadcast(
                cast.method, cast.params, capability=cast.capability, timeout=cast.timeout
            )
        finally:
            self.calls_in_flight -= 1
        answers: dict[str, Any] = {}
        for agent_id, outcome in outcomes.items():
            if outcome.error is None:
                answers[agent_id] = {"result": outcome.result}
            else:
                error = outcome.error
                answers[agent_id] = {"error": {"code": error.code, "message": str(error)}}
        return _json(200, {"agents": answers})
