"""What the orchestrator serves on every link: ``mesh/call``, agent-to-agent calls.

An agent asks the mesh to call another one (``RequestContext.call_agent``); the
router hands it to whatever calls agents by id — the door, which it knows
only by that one method — on behalf of the calling agent, so the door checks
both agents' access sections. What an agent tells the mesh of its tools,
resources and prompts goes to :class:`Notices`, for whoever follows them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, Unpack

import msgspec

from mesh._errors import InvalidParams, MethodNotFound
from mesh._logging import get_logger
from mesh._orchestrator.access import NOBODY, Principal
from mesh._rpc.asks import AskHandlers, forward_to
from mesh._rpc.peer import Peer, RequestContext
from mesh._rpc.session import ROUTE_METHOD
from mesh._telemetry.metrics import served

__all__ = ["AGENT_NOTICES", "TOOLS_CHANGED", "CallsAgents", "Notices", "Router"]

log = get_logger("mesh.orchestrator")

#: What an agent tells the mesh when its tools change (MCP's name, without the prefix).
TOOLS_CHANGED = "tools/list_changed"
#: What else an agent tells the mesh of its resources and prompts (MCP's names, no prefix):
#: handed to whoever follows them (the MCP servers), as ``(agent, method, params)``.
AGENT_NOTICES = frozenset({"resources/updated", "resources/list_changed", "prompts/list_changed"})


class CallsAgents(Protocol):
    """Calls an agent by id, for someone; the door is one."""

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


class Notices:
    """What agents say changed of theirs, handed to whoever follows it (the MCP servers)."""

    def __init__(self) -> None:
        self._tools_listeners: set[Callable[[str], None]] = set()
        self._notice_listeners: set[Callable[[str, str, Any], None]] = set()

    def add_tools_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(agent)`` whenever an agent says its tools changed."""
        self._tools_listeners.add(listener)

    def remove_tools_listener(self, listener: Callable[[str], None]) -> None:
        self._tools_listeners.discard(listener)

    def tools_changed(self, agent: str) -> None:
        """An agent (a mounted MCP server, say) told us its list of tools changed."""
        log.info("mesh.tools_changed", agent=agent)
        for listener in list(self._tools_listeners):
            listener(agent)

    def add_notice_listener(self, listener: Callable[[str, str, Any], None]) -> None:
        """Call ``listener(agent, method, params)`` whenever an agent says one of its
        resources, or its list of resources or prompts, changed."""
        self._notice_listeners.add(listener)

    def remove_notice_listener(self, listener: Callable[[str, str, Any], None]) -> None:
        self._notice_listeners.discard(listener)

    def agent_notice(self, agent: str, method: str, params: Any) -> None:
        """An agent told us a resource or a list changed (one of :data:`AGENT_NOTICES`)."""
        log.debug("mesh.agent_notice", agent=agent, method=method)
        for listener in list(self._notice_listeners):
            listener(agent, method, params)


class _RouteParams(msgspec.Struct, forbid_unknown_fields=True):
    agent: str
    method: str
    params: Any = None
    timeout: float | None = None


class Router:
    """Serves ``mesh/call`` on a link by calling the target through ``door``, and hands
    an agent's notices to ``notices``."""

    def __init__(self, door: CallsAgents, notices: Notices) -> None:
        self._door = door
        self._notices = notices

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
            return await self._door.call(
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
            self._notices.tools_changed(peer.agent)
            return
        if method in AGENT_NOTICES and peer is not None and peer.agent is not None:
            self._notices.agent_notice(peer.agent, method, params)
            return
        log.debug("mesh.notification", method=method)
