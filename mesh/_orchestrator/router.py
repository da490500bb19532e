"""What the orchestrator serves on every link: ``mesh/call``, agent-to-agent calls.

An agent asks the mesh to call another one (``RequestContext.call_agent``); the
router checks the route and hands it to whatever calls agents by id — the
orchestrator, which it knows only by that one method.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from mesh._errors import InvalidParams, MethodNotFound
from mesh._logging import get_logger
from mesh._orchestrator.access import check_agent_call, check_relayable
from mesh._rpc.peer import Peer, RequestContext
from mesh._rpc.session import ROUTE_METHOD
from mesh.manifests._types import AccessSection

__all__ = ["CallsAgents", "Router"]

log = get_logger("mesh.orchestrator")

#: The one method the mesh serves to its agents.


class CallsAgents(Protocol):
    """Calls an agent by id; :class:`mesh.MeshOrchestrator` is one."""

    async def call(
        self, agent: str, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Any: ...

    def access_of(self, agent: str) -> AccessSection:
        """Who may call ``agent`` and whom it may call (a manifest's ``[access]``)."""
        ...


class _RouteParams(msgspec.Struct, forbid_unknown_fields=True):
    agent: str
    method: str
    params: Any = None
    timeout: float | None = None


class Router:
    """Serves ``mesh/call`` on a link by calling the target through ``mesh``."""

    def __init__(self, mesh: CallsAgents) -> None:
        self._mesh = mesh

    async def handle_request(self, ctx: RequestContext, method: str, params: Any) -> Any:
        if method != ROUTE_METHOD:
            raise MethodNotFound(f"the mesh serves {ROUTE_METHOD!r}, not {method!r}")
        try:
            route = msgspec.convert(params, _RouteParams)
        except msgspec.ValidationError as exc:
            raise InvalidParams(f"invalid {ROUTE_METHOD} params: {exc}") from None
        # Methods the daemon sends itself never come from an agent, and both the
        # caller's access.calls and the target's access.callers must agree.
        check_relayable(route.method, agent=route.agent, via=ROUTE_METHOD)
        caller = ctx.peer.agent if ctx.peer is not None else None
        if caller is not None:
            check_agent_call(
                self._mesh.access_of(caller),
                self._mesh.access_of(route.agent),
                caller_id=caller,
                agent=route.agent,
                method=route.method,
            )
        log.debug("mesh.route", to=route.agent, method=route.method)
        return await self._mesh.call(route.agent, route.method, route.params, timeout=route.timeout)

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        log.debug("mesh.notification", method=method)
