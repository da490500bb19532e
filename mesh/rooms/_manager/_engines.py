"""Each room's engine: started in the manager's task group, halted, resumed, waited for.

An engine (a :class:`~mesh.rooms._engine.RoomRunner`) runs while its room takes
turns. Halting it records the stop; cancelling its scope (the manager closing,
or the room's lease gone to another daemon) records nothing, so the room is
still running as far as the store knows and is resumed where it was.
"""

from __future__ import annotations

import anyio
import anyio.abc

from mesh._logging import get_logger
from mesh._orchestrator.access import Principal
from mesh.rooms._engine import Presence, RoomRunner, Speak
from mesh.rooms._errors import RoomConflict
from mesh.rooms._events import ResumedEvent, StoppedEvent
from mesh.rooms._manager._table import HeldRoom, RoomTable, elsewhere, in_thread
from mesh.rooms._model import RoomSnapshot, RoomStatus, StopReason
from mesh.rooms._replica import RoomLeaseLost, RoomOp

__all__ = ["Engines"]

log = get_logger("mesh.rooms")


class Engines:
    """Starts and stops the engines of the rooms in ``table``; see the module docstring."""

    def __init__(
        self,
        table: RoomTable,
        speak: Speak,
        presence: Presence | None,
        person_wait: float | None = None,
    ) -> None:
        self._table = table
        self._person_wait = person_wait
        self._speak = speak
        self._presence = presence
        #: The manager's task group while it is open; engines run in it.
        self.tasks: anyio.abc.TaskGroup | None = None

    def start(self, room: HeldRoom) -> None:
        if self.tasks is None:
            raise RuntimeError("use the RoomManager as `async with RoomManager(...) as rooms:`")
        runner = room.runner = RoomRunner(
            room.journal,
            self._speak,
            presence=self._presence,
            people=room.desk,
            person_wait=self._person_wait,
        )
        room.scope = anyio.CancelScope()
        self.tasks.start_soon(self._run_room, room, runner, room.scope)

    async def _run_room(self, room: HeldRoom, runner: RoomRunner, scope: anyio.CancelScope) -> None:
        room_id = room.state.room.id
        finished = False
        try:
            with scope:
                await runner.run()
                finished = True
        except RoomLeaseLost as exc:
            log.info("room.taken_over", room=room_id, detail=str(exc))
            replica = self._table.replica
            if replica is not None:  # if the lease is still ours, let whoever is right take it
                await replica.release(room_id)
        except Exception:
            # A broken store (disk full, say) stops this room's engine, not the daemon;
            # the room stays "running" in the store and is resumed by the next start.
            log.exception("room.engine_failed", room=room_id)
        finally:
            if room.runner is runner:
                room.runner = None
                room.scope = None
            self._table.forget_if_idle(room)
        replica = self._table.replica
        if finished and replica is not None:
            await replica.release(room_id)  # stopped or paused here: anyone may resume it

    async def resume_running(self) -> None:
        """Resume every room the store has as running (the manager is opening)."""
        for snapshot in await in_thread(self._table.store.snapshots, RoomStatus.RUNNING):
            room = await self._table.load(snapshot.id)
            log.info("room.resuming", room=snapshot.id, next_turn=room.state.current_turn + 1)
            await room.journal.emit(
                ResumedEvent(room_id=snapshot.id, next_turn=room.state.current_turn + 1)
            )
            self.start(room)

    async def resume(
        self,
        room_id: str,
        *,
        forward: bool = True,
        by: str | None = None,
        person: Principal | None = None,
    ) -> RoomSnapshot:
        room = await self._table.load(room_id)
        async with room.control:
            state = room.state
            if room.runner is not None:
                return state.snapshot()
            if state.stop_reason is not None and not state.stop_reason.resumable:
                raise RoomConflict(
                    f"room {room_id!r} has finished ({state.stop_reason}); it cannot be resumed",
                    room=room_id,
                )
            replica = self._table.replica
            if replica is not None:
                if not await replica.claim(room_id):
                    forwarded = (
                        await replica.forward(room_id, "resume", by=by, person=person)
                        if forward
                        else None
                    )
                    if forwarded is None:
                        raise elsewhere(room_id)
                    return forwarded  # another daemon runs it
                await self._table.refresh(room)  # the claim caught the store up: so must memory
            if state.status is not RoomStatus.RUNNING:
                await room.journal.emit(
                    ResumedEvent(room_id=state.room.id, next_turn=state.current_turn + 1)
                )
            self.start(room)
            return state.snapshot()

    async def halt(
        self,
        room_id: str,
        reason: StopReason,
        *,
        forward: bool = True,
        by: str | None = None,
        person: Principal | None = None,
    ) -> RoomSnapshot:
        room = await self._table.load(room_id)
        async with room.control:
            state = room.state
            if room.runner is not None:
                room.runner.request_stop(reason)
                await room.runner.done.wait()
                return state.snapshot()
            op: RoomOp = "pause" if reason is StopReason.PAUSED else "stop"
            replica = self._table.replica
            if replica is not None and forward:
                forwarded = await replica.forward(room_id, op, by=by, person=person)
                if forwarded is not None:
                    return forwarded  # the daemon that runs it did it
            if reason is StopReason.PAUSED and state.status is RoomStatus.STOPPED:
                raise RoomConflict(
                    f"room {room_id!r} has stopped ({state.stop_reason}); "
                    "only a running room can be paused",
                    room=room_id,
                )
            paused_again = reason is StopReason.PAUSED and state.status is RoomStatus.PAUSED
            if not paused_again and state.status is not RoomStatus.STOPPED:
                async with self._table.leased(room):
                    await room.journal.emit(
                        StoppedEvent(
                            room_id=state.room.id,
                            reason=reason,
                            turn=state.current_turn,
                            detail=f"{reason.name.lower()} on request",
                        )
                    )
            return state.snapshot()

    async def wait(self, room_id: str) -> RoomSnapshot:
        room = await self._table.load(room_id)
        while room.runner is not None:
            await room.runner.done.wait()
        return room.state.snapshot()

    def relinquish(self, room_id: str) -> None:
        room = self._table.rooms.get(room_id)
        if room is not None and room.scope is not None:
            room.scope.cancel()

    def running_here(self) -> list[str]:
        return [room_id for room_id, room in self._table.rooms.items() if room.runner is not None]
