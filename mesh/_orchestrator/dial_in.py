"""A link an agent dialled in on: its record, and a newer connection taking its id over.

An agent that dials in says who it is in ``agent/info``; the registry's record takes
the manifest's word first, then the agent's. A second connection for the same id is
a rolling restart: calls go to it at once, and the one it replaced finishes the
calls it has in flight (bounded by :data:`TAKEOVER_DRAIN_TIMEOUT`) before it closes.
The links table (:meth:`~mesh._orchestrator.table.LinkTable.serve_dial_in`) drives these.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import msgspec

from mesh._logging import get_logger
from mesh._orchestrator.liveness import probe
from mesh._orchestrator.spec import AgentSpec
from mesh._orchestrator.view import Link
from mesh._rpc.peer import Peer
from registry import AgentRecord, Registry

__all__ = ["TAKEOVER_DRAIN_TIMEOUT", "dialled_record", "serve_until_replaced", "take_over"]

log = get_logger("mesh.orchestrator")

#: A dial-in connection that another took over gets at most this long to finish
#: the calls it has in flight before it is closed.
TAKEOVER_DRAIN_TIMEOUT: Final = 30.0


def dialled_record(spec: AgentSpec, info: dict[str, Any]) -> AgentRecord:
    """The registry's record of an agent that dialled in: the manifest's word first, then
    what the agent said of itself in ``agent/info``."""
    record = spec.record()
    if not info:
        return record
    return msgspec.structs.replace(
        record,
        name=spec.name or str(info.get("name") or spec.id),
        capabilities=spec.capabilities or frozenset(info.get("capabilities", ())),
    )


def take_over(link: Link, peer: Peer) -> None:
    """Route the agent's calls to ``peer`` from now on; tell the previous one to go."""
    previous = link.peer
    link.peer = peer
    link.replaced[peer] = anyio.Event()
    if isinstance(previous, Peer) and previous in link.replaced:
        log.info("mesh.dial_in_taken_over", agent=link.spec.id)
        link.replaced.pop(previous).set()


async def serve_until_replaced(
    link: Link,
    peer: Peer,
    registry: Registry,
    on_replaced: Callable[[], Awaitable[None]] | None,
) -> None:
    """Probe ``peer`` until it closes, or until a newer connection takes over."""
    replaced = link.replaced.get(peer) or anyio.Event()

    async def stop_when_replaced(scope: anyio.CancelScope) -> None:
        await replaced.wait()
        scope.cancel()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_when_replaced, tg.cancel_scope)
            await probe(link, registry)
            tg.cancel_scope.cancel()
        if replaced.is_set():
            with anyio.move_on_after(min(link.spec.call_timeout, TAKEOVER_DRAIN_TIMEOUT)):
                await peer.wait_calls_finished()
            if on_replaced is not None:
                await on_replaced()
    finally:
        link.replaced.pop(peer, None)
