"""The daemon's HTTP API: JSON in, JSON out, and a 4xx that says why for bad input.

Bodies are decoded by msgspec into typed requests, so a wrong field is reported
with its path (``$.heartbeat_interval``). Mesh errors map to statuses: unknown
agent 404, offline or unreachable 503, timeout 504, an error the agent answered
502, too large 413, forbidden 403. Nothing here ever returns a stack trace.

Calls through ``/rpc`` and ``/broadcast`` are made on behalf of the caller's
token, and the orchestrator's door refuses what it may not do (a method
reserved to the daemon, a target whose ``access.callers`` does not admit it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

import anyio
import msgspec

from mesh._errors import (
    AgentUnavailable,
    CallTimeout,
    ConnectionLost,
    Forbidden,
    MeshError,
    MessageTooLarge,
)
from mesh._logging import get_logger
from mesh._orchestrator.orchestrator import MeshOrchestrator
from mesh._orchestrator.view import LINK_STATUSES
from mesh._rpc.asks import refusing
from mesh._telemetry.metrics import served
from mesh._telemetry.tracing import serving, tool_of, trace_from
from mesh.daemon._a2a import DaemonA2a
from mesh.daemon._agents import AgentRoutes
from mesh.daemon._auth import Identities, Identity, Right
from mesh.daemon._lifecycle import Lifecycle
from mesh.daemon._limits import check_id
from mesh.daemon._mcp import DaemonMcp
from mesh.daemon._metrics import Probes
from mesh.daemon._rooms import RoomRoutes
from mesh.daemon._routes import HttpHandler, Params, RouteTable, WebSocketHandler, read_body
from mesh.daemon._settings import DaemonSettings
from mesh.daemon._tokens import Role, TokenError, TokenNameTaken, TooManyTokens
from mesh.protocol import MethodName
from transports import HttpRequest, HttpResponse, WebSocketConfig

__all__ = ["DaemonApi", "mesh_error_status"]

log = get_logger("mesh.daemon")
#: An agent's asks during a ``POST /rpc`` call: one HTTP exchange has no way back to
#: its caller, so each is refused at once, saying where asks do reach.
_NO_WAY_BACK: Final = refusing(
    "the caller of this call takes no elicitation or sampling: POST /rpc is one HTTP"
    " exchange, with no way back mid-call (call through /mcp, `mesh mcp` or the SDK)"
)


class BroadcastBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    method: MethodName
    params: Any = None
    capability: str | None = None
    timeout: float = 10.0


class RpcBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    agent: str
    method: MethodName
    params: Any = None
    timeout: float | None = None


class TokenBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    role: Role
    name: str
    agent: str | None = None


def mesh_error_status(exc: MeshError, *, known: bool = True) -> int:
    """The HTTP status for a mesh error; ``known``: whether anyone configured the agent."""
    if isinstance(exc, AgentUnavailable):
        return 503 if known else 404
    if isinstance(exc, CallTimeout):
        return 504
    if isinstance(exc, ConnectionLost):
        return 503
    if isinstance(exc, MessageTooLarge):
        return 413
    if isinstance(exc, Forbidden):
        return 403  # the daemon's own refusal (a reserved method, the access section)
    # An answer the agent gave (RemoteError), or a refusal or a broken frame from it
    # (Unauthorized, ProtocolError): the daemon worked, the agent's side did not.
    return 502


def _mesh_error(exc: MeshError, *, known: bool = True) -> HttpResponse:
    return HttpResponse.error(
        mesh_error_status(exc, known=known), str(exc), code=exc.code, data=exc.data
    )


class ClusterView(Protocol):
    """What the API asks of the cluster this daemon belongs to (a ``mesh.cluster.Cluster``,
    which needs the optional extra: typed here, imported only with ``--nats``)."""

    def holder(self, agent_id: str) -> str:
        """The daemon that holds ``agent_id``."""
        ...

    def describe(self) -> dict[str, Any]:
        """For ``GET /health``: the cluster, NATS, and the daemons this one sees."""
        ...


class DaemonApi:
    """Every route's handler, behind one :class:`~mesh.daemon._routes.RouteTable`."""

    def __init__(
        self,
        orchestrator: MeshOrchestrator,
        rooms: RoomRoutes,
        identities: Identities,
        settings: DaemonSettings,
        *,
        dial_in: WebSocketHandler,
        manifest_ids: frozenset[str] = frozenset(),
        more_http: Mapping[str, HttpHandler] | None = None,
    ) -> None:
        self._door = orchestrator.door
        self._links = orchestrator.links
        self._identities = identities
        self._settings = settings
        self.agents = AgentRoutes(
            orchestrator.links, settings, manifest_ids, token_for=identities.store.names_agent
        )
        self._started = anyio.current_time()
        self.calls_in_flight = 0
        self.lifecycle = Lifecycle()
        self._cluster: ClusterView | None = None
        agents = self.agents
        room_handlers = rooms.http_handlers()
        self.mcp = DaemonMcp(
            orchestrator,
            room_handlers,
            max_sessions=settings.max_mcp_sessions,
            max_sessions_per_owner=settings.max_mcp_sessions_per_identity,
            host=settings.host,
        )
        self.probes = Probes(orchestrator.links, self.lifecycle)
        self.a2a = DaemonA2a(orchestrator.door, settings)
        self.routes = RouteTable(
            identities,
            http={
                "health": self.handle_health,
                "agents": agents.handle_agents,
                "agent": agents.handle_agent,
                "register": agents.handle_register,
                "heartbeat": agents.handle_heartbeat,
                "deregister": agents.handle_deregister,
                "rpc": self.handle_rpc,
                "broadcast": self.handle_broadcast,
                "whoami": self.handle_whoami,
                "tokens": self.handle_tokens,
                "create_token": self.handle_create_token,
                "revoke_token": self.handle_revoke_token,
                "mcp": self.mcp.handle_http,
                **self.probes.http_handlers(),
                "a2a_card": self.a2a.handle_card,
                "a2a": self.a2a.handle_rpc,
                "a2a_rest": self.a2a.handle_rest,
                **room_handlers,
                **(more_http or {}),
            },
            websocket={
                "watch_agents": agents.watch_agents,
                "observe_room": rooms.observe,
                "dial_in": dial_in,
                "mcp_stream": self.mcp.serve_stream,
            },
            ws_config=WebSocketConfig(
                ping_interval=settings.ping_interval, ping_timeout=settings.ping_timeout
            ),
            refuse_origin=self.mcp.refuse_stream_origin,
        )

    async def handle(self, request: HttpRequest) -> HttpResponse:
        return await self.lifecycle.run(request, self.routes.handle)

    @property
    def cluster(self) -> ClusterView | None:
        """The ``mesh.cluster.Cluster`` this daemon belongs to (``--nats``), or None."""
        return self._cluster

    @cluster.setter
    def cluster(self, cluster: ClusterView | None) -> None:
        self._cluster = cluster
        self.probes.cluster = cluster
        self.agents.holder = None if cluster is None else cluster.holder

    async def handle_health(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        """Status and counts for anyone; the cluster's daemons, URLs and rooms only for a
        token that may read (a stranger must not learn the mesh's layout)."""
        counts = dict.fromkeys(LINK_STATUSES, 0)
        for view in self._links.views():
            counts[view.status] = counts.get(view.status, 0) + 1
        health: dict[str, Any] = {
            "status": self.lifecycle.phase,
            "uptime": round(anyio.current_time() - self._started, 3),
            "calls_in_flight": self.calls_in_flight,
            "agents": counts,
        }
        if self._cluster is not None:
            caller = self._identities.identify(request)
            described = self._cluster.describe()
            if caller is not None and caller.may(Right.READ):
                health["cluster"] = described
            else:
                health["cluster"] = {
                    "connected": described["nats"]["connected"],
                    "daemons": len(described["daemons"]),
                    "remote_agents": described["remote_agents"],
                    "rooms": len(described["rooms"]),
                }
        return HttpResponse.json(200, health)

    # -- calls ----------------------------------------------------------------------

    async def handle_rpc(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        call = read_body(request, RpcBody, "call")
        self.calls_in_flight += 1
        started = anyio.current_time()
        try:
            trace = trace_from(dict(request.headers))
            tool = tool_of(call.method, call.params)
            with (
                served("http", call.method),
                serving(call.method, trace, agent=call.agent, tool=tool),
            ):
                result = await self._door.acting_for(who.principal).call(
                    call.agent, call.method, call.params, timeout=call.timeout, **_NO_WAY_BACK
                )
        except MeshError as exc:
            return _mesh_error(exc, known=self._door.knows(call.agent))
        finally:
            self.calls_in_flight -= 1
        # The round trip as the daemon saw it, in the standard header for a server's
        # own timings (what `mesh ping` reports; the body stays the call's result).
        elapsed_ms = (anyio.current_time() - started) * 1000
        timing = (("server-timing", f"call;dur={elapsed_ms:.3f}"),)
        return HttpResponse(200, msgspec.json.encode({"result": result}), headers=timing)

    async def handle_broadcast(
        self, request: HttpRequest, who: Identity, _: Params
    ) -> HttpResponse:
        cast = read_body(request, BroadcastBody, "broadcast")
        self.calls_in_flight += 1
        try:
            outcomes = await self._door.acting_for(who.principal).broadcast(
                cast.method, cast.params, capability=cast.capability, timeout=cast.timeout
            )
        except MeshError as exc:  # the door refused the method itself (a reserved one)
            return _mesh_error(exc)
        finally:
            self.calls_in_flight -= 1
        answers: dict[str, Any] = {}
        for agent_id, outcome in outcomes.items():
            if outcome.error is None:
                answers[agent_id] = {"result": outcome.result}
            else:
                error = outcome.error
                answers[agent_id] = {"error": {"code": error.code, "message": str(error)}}
        return HttpResponse.json(200, {"agents": answers})

    # -- tokens (admin) -------------------------------------------------------------------

    async def handle_tokens(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        return HttpResponse.json(
            200, {"tokens": [entry.shown() for entry in self._identities.store.entries()]}
        )

    async def handle_whoami(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        shown = {"id": who.token_id, "name": who.name, "role": str(who.role), "agent": who.agent}
        # The longest deadline this token may give (a room's seconds per reply, say).
        return HttpResponse.json(
            200, {**shown, "max_call_timeout": self._settings.max_call_timeout}
        )

    async def handle_create_token(
        self, request: HttpRequest, who: Identity, _: Params
    ) -> HttpResponse:
        body = read_body(request, TokenBody, "token request")
        if body.agent is not None and (why := check_id(body.agent)) is not None:
            return HttpResponse.error(400, why)
        try:
            entry, token = self._identities.store.create(body.role, body.name, agent=body.agent)
        except TooManyTokens as exc:
            return HttpResponse.error(429, str(exc), limit="max_tokens")
        except TokenNameTaken as exc:
            return HttpResponse.error(409, str(exc), rule="unique token names")
        except TokenError as exc:
            return HttpResponse.error(400, str(exc))
        return HttpResponse.json(201, {**entry.shown(), "token": token})

    async def handle_revoke_token(
        self, request: HttpRequest, who: Identity, p: Params
    ) -> HttpResponse:
        try:
            revoked = await self._identities.revoke(p["id"])
        except TokenError as exc:
            return HttpResponse.error(404, str(exc))
        return HttpResponse.json(200, {"revoked": [entry.shown() for entry in revoked]})
