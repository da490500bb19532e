"""Deleting finished rooms: on request (the daemon's DELETE /rooms/{id}) and by age."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mesh.demo.fixtures import demo_chat
from mesh.rooms import Limits, RoomConflict, RoomManager, RoomNotFound, RoomSpec, StopReason

from ._helpers import GUARD, direct_describer, direct_speaker, read_db, seat_agent

pytestmark = pytest.mark.anyio


class Clock:
    """Epoch milliseconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_767_772_800_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def manager(data_dir: Path, clock: Clock) -> RoomManager:
    agents = [seat_agent(seat) for seat in demo_chat()]
    return RoomManager(
        data_dir, speak=direct_speaker(agents), describe=direct_describer(agents), clock=clock
    )


def spec(room_id: str, owner_turns: int = 4) -> RoomSpec:
    limits = Limits(retry_delay=0, max_turns=owner_turns)
    return RoomSpec(id=room_id, topic="t", members=("alice", "bob"), limits=limits)


async def test_a_stopped_room_is_deleted_with_its_log_and_rows(tmp_path: Path) -> None:
    clock = Clock()
    async with manager(tmp_path, clock) as rooms:
        created = await rooms.create(spec("done"), owner="token:ab12")
        assert created.room.owner == "token:ab12"
        with anyio.fail_after(GUARD):
            await rooms.wait("done")
        assert (await rooms.active_count()) == 0
        await rooms.delete("done")
        with pytest.raises(RoomNotFound):
            await rooms.get("done")
        with pytest.raises(RoomNotFound):
            await rooms.delete("done")
    assert not (tmp_path / "rooms" / "done.jsonl").exists()
    assert read_db(tmp_path, "done") == {"room": None, "members": [], "messages": []}


async def test_a_room_made_again_under_a_deleted_rooms_id_takes_its_turns(
    tmp_path: Path,
) -> None:
    """The same agents, which took turns 1-4 of the old room, take turns 1-4 of the new one
    (they once refused its turn 1 as stale, and the room ended in ERROR at turn 0)."""
    clock = Clock()
    async with manager(tmp_path, clock) as rooms:
        for _ in range(2):
            await rooms.create(spec("again"), owner="token:ab12")
            with anyio.fail_after(GUARD):
                done = await rooms.wait("again")
            assert (done.stop_reason, done.current_turn) == (StopReason.MAX_TURNS, 4), done
            await rooms.delete("again")


async def test_a_running_or_paused_room_is_not_deleted(tmp_path: Path) -> None:
    clock = Clock()
    async with manager(tmp_path, clock) as rooms:
        await rooms.create(spec("busy", owner_turns=1000))
        assert (await rooms.active_count()) == 1
        with pytest.raises(RoomConflict, match="only a stopped room can be deleted"):
            await rooms.delete("busy")
        await rooms.pause("busy")
        with pytest.raises(RoomConflict):
            await rooms.delete("busy")
        await rooms.stop("busy")
        await rooms.delete("busy")


async def test_finished_rooms_older_than_the_retention_are_deleted(tmp_path: Path) -> None:
    clock = Clock()
    async with manager(tmp_path, clock) as rooms:
        for room_id in ("old", "new"):
            await rooms.create(spec(room_id))
            with anyio.fail_after(GUARD):
                await rooms.wait(room_id)
            clock.now += 60_000  # a minute passes after each
        await rooms.create(spec("running", owner_turns=1000))
        assert await rooms.delete_finished(older_than_ms=90_000) == ["old"]
        assert [s.id for s in await rooms.list()] == ["new", "running"]
        await rooms.stop("running")
