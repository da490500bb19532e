"""Agents that dial in to the daemon on ``/ws``, each with a token that names it.

Each connection is served by the links table (``serve_dial_in``) as that agent's
link. An id registered over HTTP cannot also dial in (4003); an agent whose
``agent/info`` names another id than its token is refused (4003, so it does not
redial); a newer connection for the same id takes over (4009 to the old one).
At shutdown, every dial-in link still open is closed with 1001.
"""

from __future__ import annotations

from collections.abc import Mapping

import anyio

from mesh._errors import MeshError, Unauthorized
from mesh._logging import get_logger
from mesh._orchestrator.table import LinkTable
from mesh.daemon._auth import Identity
from mesh.daemon._routes import Params
from transports import CloseCode, WebSocketStream

__all__ = ["DialIns"]

log = get_logger("mesh.daemon")


class DialIns:
    """The daemon's dial-in links: served one per connection, closed together at shutdown."""

    def __init__(self, links: LinkTable) -> None:
        self._links = links
        self._open: set[WebSocketStream] = set()
        #: Ids registered over HTTP (and who owns each): those may not dial in.
        self.owners: Mapping[str, str] = {}

    async def serve(self, stream: WebSocketStream, who: Identity, _: Params) -> None:
        agent_id = who.agent
        assert agent_id is not None  # only agent tokens hold the dial right
        if agent_id in self.owners:
            await stream.aclose(CloseCode.FORBIDDEN, f"{agent_id!r} is registered over HTTP")
            return

        async def refuse(why: str) -> None:  # before the link closes: the code tells it why
            await stream.aclose(CloseCode.FORBIDDEN, why[:120])

        async def taken_over() -> None:
            await stream.aclose(CloseCode.TAKEN_OVER, "another connection took this agent over")

        self._open.add(stream)
        try:
            await self._links.serve_dial_in(stream, agent_id, refuse=refuse, on_replaced=taken_over)
        except Unauthorized as exc:  # closed with 4003 already, by refuse()
            log.warning("daemon.dial_in_refused", agent=agent_id, error=str(exc))
        except MeshError as exc:
            # Not a refusal (its handshake timed out, its link dropped): it may dial
            # again, so no 4003, which would tell it to stop for good.
            log.info("daemon.dial_in_ended", agent=agent_id, error=str(exc))
        finally:
            self._open.discard(stream)

    async def close_all(self) -> None:
        """Close every dial-in link still open with 1001 (the daemon is going away)."""
        async with anyio.create_task_group() as tg:
            for stream in list(self._open):
                tg.start_soon(stream.aclose, CloseCode.GOING_AWAY, "daemon shutting down")
