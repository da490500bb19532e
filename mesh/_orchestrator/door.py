"""The door: every call to an agent, made for someone, checked once, then sent on its link.

Every surface's call passes here (``/rpc``, ``/broadcast``, ``mesh/call``, a room's
turns, ``/mcp``, ``/a2a``, a call from another daemon): who it is made for
(``on_behalf_of``: nobody unless said, and a call for nobody is refused) against
the reserved methods, the access sections and the longest deadline it may give
(``max_call_timeout``), before any link is touched (:meth:`Door.authorize`). Then
the links table (:class:`~mesh._orchestrator.table.LinkTable`) hands over the
agent's caller, or fails at once with :class:`~mesh.AgentUnavailable` for an agent
the registry does not know or knows offline; the call is observed (metrics, and a
span with tracing on) on its way through.

A surface holds the door, or a :class:`~mesh.BoundCaller` made from it, and never
a link: so each rule is written, and runs, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Unpack

import anyio

from mesh._errors import MeshError
from mesh._orchestrator.access import (
    EMBEDDER,
    NOBODY,
    Principal,
    authorize,
    check_deadline,
    check_named,
    check_relayable,
)
from mesh._orchestrator.bound import DEFAULT_BROADCAST_TIMEOUT, BoundCaller
from mesh._orchestrator.observe import call_done, call_failed, call_started, observe_call
from mesh._orchestrator.spec import Outcome
from mesh._orchestrator.table import LinkTable
from mesh._rpc.asks import AskHandlers
from mesh._rpc.caller import Caller, ProgressCallback
from mesh._telemetry.metrics import METRICS
from mesh._telemetry.tracing import active as tracing_active
from mesh._telemetry.tracing import tool_of
from registry import Registry

__all__ = ["Door"]


class Door:
    """Calls agents for a principal, through the one check; what a calling surface holds."""

    def __init__(self, links: LinkTable, *, max_call_timeout: float | None = None) -> None:
        """``max_call_timeout``: the longest deadline, in seconds, a call made for anyone
        but the embedder may give (None: no bound), or an agent's own ``call_timeout``
        where that is longer; see :meth:`authorize`."""
        self._links = links
        self.max_call_timeout = max_call_timeout

    @property
    def registry(self) -> Registry:
        """The registry the links keep: who is there, and how they stand (read it; the
        links table writes it)."""
        return self._links.registry

    def knows(self, agent_id: str) -> bool:
        """Whether a manifest, a registration or a dial-in names ``agent_id``."""
        return self._links.knows(agent_id)

    # -- calling ----------------------------------------------------------------------

    async def call(
        self,
        agent: str,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        on_behalf_of: Principal = NOBODY,
        **asks: Unpack[AskHandlers],
    ) -> Any:
        """Call ``method`` on ``agent``. Unknown or offline agents fail at once.

        ``on_behalf_of``: who the call is made for; a call it may not make raises
        :class:`~mesh.Forbidden` (see :meth:`authorize`). ``on_log``, ``on_elicit`` and
        ``on_sample`` hear the agent's logs and answer its asks (see :mod:`mesh._rpc.asks`).
        """
        knows = self._links.knows
        if tracing_active():  # the same, inside a CLIENT span
            with observe_call(agent, method, knows, tool_of(method, params)):
                caller = self._caller(agent, method, on_behalf_of, timeout)
                return await caller.call(
                    method, params, timeout=timeout, on_progress=on_progress, **asks
                )
        # Metrics only: no object, no context manager (this path is measured per call).
        started = call_started()
        try:
            caller = self._caller(agent, method, on_behalf_of, timeout)
            result = await caller.call(
                method, params, timeout=timeout, on_progress=on_progress, **asks
            )
        except BaseException as exc:
            call_failed(agent, method, exc, started, knows)
            raise
        call_done(agent, method, started)
        return result

    async def call_tool(
        self,
        agent: str,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        on_behalf_of: Principal = NOBODY,
        **asks: Unpack[AskHandlers],
    ) -> Any:
        """Call one of an agent's tools: ``await door.call_tool("a", "echo", {"message": "hi"})``.

        ``arguments`` go to the tool as they are (a tool argument may be named
        ``timeout``); ``timeout`` and ``on_progress`` are the call's own.
        """
        # Through `call`, as every call is: the one place calls are checked and observed.
        params = {"name": name, "arguments": dict(arguments or {})}
        return await self.call(
            agent,
            "tools/call",
            params,
            timeout=timeout,
            on_progress=on_progress,
            on_behalf_of=on_behalf_of,
            **asks,
        )

    async def list_tools(
        self, agent: str, *, timeout: float | None = None, on_behalf_of: Principal = NOBODY
    ) -> list[dict[str, Any]]:
        """``agent``'s tools: name, description and JSON Schema of the arguments."""
        result = await self.call(agent, "tools/list", timeout=timeout, on_behalf_of=on_behalf_of)
        return list(result["tools"])

    async def ping(
        self, agent: str, *, timeout: float | None = None, on_behalf_of: Principal = NOBODY
    ) -> float:
        """Round-trip a ``ping`` to ``agent``; returns the seconds it took."""
        started = anyio.current_time()
        await self.call(agent, "ping", timeout=timeout, on_behalf_of=on_behalf_of)
        return anyio.current_time() - started

    async def broadcast(
        self,
        method: str,
        params: Any = None,
        *,
        capability: str | None = None,
        timeout: float = DEFAULT_BROADCAST_TIMEOUT,
        on_behalf_of: Principal = NOBODY,
    ) -> dict[str, Outcome]:
        """Call every registered agent (with ``capability``, if given); see :meth:`multicast`."""
        targets = [record.id for record in self.registry.find(capability)]
        return await self.multicast(
            targets, method, params, timeout=timeout, on_behalf_of=on_behalf_of
        )

    async def multicast(
        self,
        agent_ids: Iterable[str],
        method: str,
        params: Any = None,
        *,
        timeout: float = DEFAULT_BROADCAST_TIMEOUT,
        on_behalf_of: Principal = NOBODY,
    ) -> dict[str, Outcome]:
        """Call several agents at once; each answers or fails on its own, all by ``timeout``.

        A method ``on_behalf_of`` may send to none (a reserved one), or a ``timeout``
        past its ``max_call_timeout``, raises :class:`~mesh.Forbidden` for the whole;
        an agent it may not call is that agent's outcome.
        """
        ids = list(dict.fromkeys(agent_ids))
        check_named(on_behalf_of, agent="*", method=method)
        if on_behalf_of.kind != "embedder" and on_behalf_of.room is None:
            check_relayable(method, agent="*", via=on_behalf_of.describe())
        check_deadline(on_behalf_of, timeout, self.max_call_timeout, agent="*", method=method)
        METRICS.fanout.observe((), len(ids))
        outcomes: dict[str, Outcome] = {}

        async def one(agent_id: str) -> None:
            try:
                result = await self.call(
                    agent_id, method, params, timeout=timeout, on_behalf_of=on_behalf_of
                )
            except MeshError as exc:
                outcomes[agent_id] = Outcome(agent_id, error=exc)
            else:
                outcomes[agent_id] = Outcome(agent_id, result=result)

        async with anyio.create_task_group() as tg:
            for agent_id in ids:
                tg.start_soon(one, agent_id)
        return {agent_id: outcomes[agent_id] for agent_id in ids}

    # -- who may call -----------------------------------------------------------------

    def acting_for(self, principal: Principal) -> BoundCaller:
        """A caller bound to ``principal``: what a surface holds, so that every call it
        makes is made for the identity it was built for (see :class:`BoundCaller`)."""
        return BoundCaller(self, principal)

    def as_embedder(self) -> BoundCaller:
        """Your own program's caller: trusted, as it could use its links directly.

        Calls on the door itself name nobody unless given ``on_behalf_of``, and it
        refuses them: the embedder is what a program says it is.
        """
        return BoundCaller(self, EMBEDDER)

    def authorize(
        self,
        agent: str,
        method: str,
        *,
        on_behalf_of: Principal = NOBODY,
        timeout: float | None = None,
    ) -> None:
        """Raise :class:`~mesh.Forbidden` unless ``on_behalf_of`` may call ``agent``,
        with a deadline of ``timeout`` seconds (None: the agent's own ``call_timeout``).

        Every call runs it first; a surface may also ask it ahead (a room asks it
        for each member at creation, with its turn timeout, and for each person who
        joins; A2A checks a task's deadline with the same rule before it starts one).
        """
        authorize(on_behalf_of, agent, method, self._links.access_of)
        check_deadline(
            on_behalf_of, timeout, self.deadline_limit(agent), agent=agent, method=method
        )

    def deadline_limit(self, agent: str) -> float | None:
        """The longest deadline a call to ``agent`` may give (None: no bound): ``max_call_timeout``,
        or the agent's own ``call_timeout`` where the operator set it longer. A call that names
        no deadline gets that one, and so does a call another daemon forwards for it."""
        limit = self.max_call_timeout
        own = self._links.call_timeout_of(agent)
        if limit is None or own is None:
            return limit
        return max(limit, own)

    def _caller(
        self, agent_id: str, method: str, on_behalf_of: Principal, timeout: float | None
    ) -> Caller:
        """The link to call ``agent_id`` on, once the door let the call through."""
        self.authorize(agent_id, method, on_behalf_of=on_behalf_of, timeout=timeout)
        return self._links.caller(agent_id, method, on_behalf_of=on_behalf_of)
