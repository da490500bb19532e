"""What the orchestrator serves on every link: ``mesh/call``, agent-to-agent calls.

An agent asks the mesh to call another one (``RequestContext.call_agent``); the
router hands it to whatever calls agents by id — the orchestrator, which it
knows only by that one method — on behalf of the calling agent, so the
orchestrator's door checks both agents' access sections.
"""

from __future__ import annotations

from typing import Any, Protocol, Unpack

import msgspec

from mesh._errors import InvalidParams, MethodNotFound
from mesh._logging import get_logger
from mesh._orchestrator.access import NOBODY, Principal
from mesh._rpc.asks import AskHandlers, forward_to
from mesh._rpc.peer import Peer, RequestContext
from mesh._rpc.session import ROUTE_METHOD
from mesh._telemetry.metrics import served

__all__ = ["AGENT_NOTICES", "TOOLS_CHANGED", "CallsAgents", "Router"]

log = get_logger("mesh.orchestrator")

#: What an agent tells the mesh when its tools change (MCP's name, without the prefix).
TOOLS_CHANGED = "tools/list_changed"
#: What else an agent tells the mesh of its resources and prompts (MCP's names, no prefix):
#: handed to whoever follows them (the MCP servers), as ``(agent, method, params)``.
AGENT_NOTICES = frozenset({"resources/updated", "resources/list_changed", "prompts/list_changed"})


class CallsAgents(Protocol):
    """Calls an agent by id; :class:`mesh.MeshOrchestrator` is one."""

    async def call(
        self,
        agent: str,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        on_behalf_of: Principal = ...,
        **asks: Unpack[AskHandlers],
    ) -> Any: ...

    def tools_changed(self, agent: str) -> None:
        """``agent`` says its list of tools changed (a mounted MCP server's did)."""
        ...

    def agent_notice(self, agent: str, method: str, params: Any) -> None:
        """``agent`` says a resource or a list of its changed (one of :data:`AGENT_NOTICES`)."""
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
        # The call is the calling agent's; a link with no id is nobody, whom the door
        # refuses. The door refuses reserved methods and checks both access sections.
        caller = ctx.peer.agent if ctx.peer is not None else None
        log.debug("mesh.route", to=route.agent, method=route.method)
        with served("agent", route.method):
            return await self._mesh.call(
                route.agent,
                route.method,
                route.params,
                timeout=route.timeout,
                on_behalf_of=Principal.agent(caller) if caller else NOBODY,
                # the target's logs and asks climb back to the agent that called it
                **forward_to(ctx),
            )

    def handle_notification(self, peer: Peer | None, method: str, params: Any) -> None:
        if method == TOOLS_CHANGED and peer is not None and peer.agent is not None:
            self._mesh.tools_changed(peer.agent)
            return
        if method in AGENT_NOTICES and peer is not None and peer.agent is not None:
            self._mesh.agent_notice(peer.agent, method, params)
            return
        log.debug("mesh.notification", method=method)
