"""A caller bound to one principal: what a surface holds to call for the identity it serves.

A surface (``/rpc``, ``/mcp``, ``/a2a``, an agent's ``mesh/call``, a room) learns
who it serves once — from a token, a link, a room's creator — and builds one
:class:`BoundCaller` for them (``door.acting_for(principal)``). Every call it makes
through it goes through the door (:class:`~mesh._orchestrator.door.Door`) for that
identity, and it has nothing else to reach for: no links, no registry writes, no
``on_behalf_of`` to forget or to get wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, Unpack

from mesh._orchestrator.access import Principal
from mesh._rpc.asks import AskHandlers
from mesh._rpc.caller import ProgressCallback
from registry import Registry

if TYPE_CHECKING:
    from mesh._orchestrator.spec import Outcome

__all__ = ["BoundCaller", "Doorway"]

#: How long a broadcast waits per agent unless told otherwise.
DEFAULT_BROADCAST_TIMEOUT: Final = 10.0


class Doorway(Protocol):
    """The door as a calling surface sees it: its calls, each for a principal, the checks
    it may ask ahead, and the registry to read who is there.

    :class:`~mesh._orchestrator.door.Door` is one, and so is :class:`~mesh.MeshOrchestrator`,
    which hands all of it to its door: a surface typed with this reaches no link.
    Written here, so that this module need not import the door that builds it.
    """

    @property
    def registry(self) -> Registry: ...

    def knows(self, agent_id: str) -> bool: ...

    def deadline_limit(self, agent: str) -> float | None: ...

    def acting_for(self, principal: Principal) -> BoundCaller: ...

    async def call(
        self,
        agent: str,
        method: str,
        params: Any = ...,
        *,
        timeout: float | None = ...,
        on_progress: ProgressCallback | None = ...,
        on_behalf_of: Principal = ...,
        **asks: Unpack[AskHandlers],
    ) -> Any: ...

    async def call_tool(
        self,
        agent: str,
        name: str,
        arguments: Mapping[str, Any] | None = ...,
        *,
        timeout: float | None = ...,
        on_progress: ProgressCallback | None = ...,
        on_behalf_of: Principal = ...,
        **asks: Unpack[AskHandlers],
    ) -> Any: ...

    async def list_tools(
        self, agent: str, *, timeout: float | None = ..., on_behalf_of: Principal = ...
    ) -> list[dict[str, Any]]: ...

    async def ping(
        self, agent: str, *, timeout: float | None = ..., on_behalf_of: Principal = ...
    ) -> float: ...

    async def broadcast(
        self,
        method: str,
        params: Any = ...,
        *,
        capability: str | None = ...,
        timeout: float = ...,
        on_behalf_of: Principal = ...,
    ) -> dict[str, Outcome]: ...

    async def multicast(
        self,
        agent_ids: Iterable[str],
        method: str,
        params: Any = ...,
        *,
        timeout: float = ...,
        on_behalf_of: Principal = ...,
    ) -> dict[str, Outcome]: ...

    def authorize(
        self,
        agent: str,
        method: str,
        *,
        on_behalf_of: Principal = ...,
        timeout: float | None = ...,
    ) -> None: ...


class BoundCaller:
    """Calls, lists and checks, all made for :attr:`principal`, through one door.

    Made by :meth:`MeshOrchestrator.acting_for` (or :meth:`~MeshOrchestrator.as_embedder`
    for your own program's calls)::

        ops = mesh.acting_for(Principal.client("ops"))
        await ops.call_tool("vault", "echo", {"message": "hi"})
        ops.check("vault", "tools/call")  # ask ahead: raises Forbidden, or returns
    """

    __slots__ = ("_mesh", "principal")

    def __init__(self, mesh: Doorway, principal: Principal) -> None:
        self._mesh = mesh
        self.principal: Final = principal

    def __repr__(self) -> str:
        return f"<BoundCaller for {self.principal.describe()}>"

    async def call(
        self,
        agent: str,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        **asks: Unpack[AskHandlers],
    ) -> Any:
        return await self._mesh.call(
            agent,
            method,
            params,
            timeout=timeout,
            on_progress=on_progress,
            on_behalf_of=self.principal,
            **asks,
        )

    async def call_tool(
        self,
        agent: str,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        **asks: Unpack[AskHandlers],
    ) -> Any:
        return await self._mesh.call_tool(
            agent,
            name,
            arguments,
            timeout=timeout,
            on_progress=on_progress,
            on_behalf_of=self.principal,
            **asks,
        )

    async def list_tools(self, agent: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        return await self._mesh.list_tools(agent, timeout=timeout, on_behalf_of=self.principal)

    async def ping(self, agent: str, *, timeout: float | None = None) -> float:
        return await self._mesh.ping(agent, timeout=timeout, on_behalf_of=self.principal)

    async def broadcast(
        self,
        method: str,
        params: Any = None,
        *,
        capability: str | None = None,
        timeout: float = DEFAULT_BROADCAST_TIMEOUT,
    ) -> dict[str, Outcome]:
        return await self._mesh.broadcast(
            method, params, capability=capability, timeout=timeout, on_behalf_of=self.principal
        )

    async def multicast(
        self,
        agent_ids: Iterable[str],
        method: str,
        params: Any = None,
        *,
        timeout: float = DEFAULT_BROADCAST_TIMEOUT,
    ) -> dict[str, Outcome]:
        return await self._mesh.multicast(
            agent_ids, method, params, timeout=timeout, on_behalf_of=self.principal
        )

    def check(self, agent: str, method: str, *, timeout: float | None = None) -> None:
        """Raise :class:`~mesh.Forbidden` unless this caller may send ``method`` to ``agent``
        (with a deadline of ``timeout`` seconds); the check every call runs first."""
        self._mesh.authorize(agent, method, on_behalf_of=self.principal, timeout=timeout)
