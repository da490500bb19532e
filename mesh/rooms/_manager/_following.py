"""Following the registry: a room's engine hears when a member goes offline or comes back.

On every (re)subscription every running room is told who is reachable now, so
a change missed while the subscription overflowed is not missed for good.
"""

from __future__ import annotations

import anyio.abc

from mesh._logging import get_logger
from mesh.rooms._engine import Presence
from mesh.rooms._manager._table import RoomTable
from mesh.rooms._mesh import PRESENT
from registry import Registry, StatusChange, SubscriberOverflow

__all__ = ["RegistryFollower"]

log = get_logger("mesh.rooms")


class RegistryFollower:
    """Passes the registry's status changes to the engines of ``table``'s rooms."""

    def __init__(self, table: RoomTable, presence: Presence | None) -> None:
        self._table = table
        self._presence = presence

    async def follow(self, registry: Registry, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        started = False
        while True:
            try:
                async with registry.subscribe() as changes:
                    if not started:
                        started = True
                        task_status.started()
                    self._resync_presence()
                    async for change in changes:
                        self._on_change(change)
            except SubscriberOverflow:
                log.warning("room.registry_overflow")  # resubscribe, then resync everyone

    def _on_change(self, change: StatusChange) -> None:
        # Each room's own task records what changed: a room that cannot record (its
        # lease is lost) stops there, and this follower of the registry goes on.
        online = change.new in PRESENT
        for room in list(self._table.rooms.values()):
            runner = room.runner
            if runner is not None and change.agent_id in {m.id for m in room.state.room.members}:
                runner.notice_presence(change.agent_id, online, str(change.kind))

    def _resync_presence(self) -> None:
        if self._presence is None:
            return
        for room in list(self._table.rooms.values()):
            if room.runner is not None:
                for member in room.state.room.members:
                    room.runner.notice_presence(member.id, self._presence(member.id))
