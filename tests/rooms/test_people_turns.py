"""A person's turn as a page shows it: its deadline, passing it, not being asked twice in a row,
and a reply already being written when someone starts watching."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mesh.rooms import (
    DeltaEvent,
    Limits,
    Member,
    MessageEvent,
    People,
    RoomConflict,
    RoomId,
    RoomManager,
    RoomSpec,
    TurnReply,
    TurnRequest,
    report_delta,
)
from mesh.rooms._model import Room
from mesh.rooms._policy import next_turn
from registry import AgentId

from ._helpers import GUARD, assert_log_and_db_agree, direct_describer
from .test_people import Held, manager, next_matching, personas, room_spec, turn_of

TALK = RoomId("talk")


def _said(agent: str, turn: int, *, interjection: bool = False) -> MessageEvent:
    return MessageEvent(
        room_id=TALK, agent_id=agent, name=agent.title(), turn=turn, text="...",
        interjection=interjection,
    )  # fmt: skip


def test_a_person_is_not_asked_to_speak_right_after_their_own_interjection() -> None:
    carol = Member(id=AgentId("carol"), name="Carol", role="person", kind="human")
    members = (Member(id=AgentId("alice")), Member(id=AgentId("bob")), carol)
    room = Room(id=TALK, topic="Tea?", members=members)
    transcript = [_said("alice", 1), _said("bob", 2), _said("carol", 3, interjection=True)]
    plan = next_turn(room, transcript)
    assert plan is not None and plan.speaker.id == "alice"  # not Carol, who has just spoken
    # Without the interjection it is Carol's turn, as before.
    plan = next_turn(room, transcript[:2])
    assert plan is not None and plan.speaker.id == "carol"
    # And if only she could speak, she is asked all the same.
    two = Room(id=TALK, topic="Tea?", members=(Member(id=AgentId("alice")), carol))
    plan = next_turn(two, [_said("alice", 1), _said("carol", 2, interjection=True)])
    assert plan is not None and plan.speaker.id == "carol"


@pytest.mark.anyio
async def test_a_person_passes_their_turn_and_sees_its_deadline(tmp_path: Path) -> None:
    speak = Held(personas(), at=2)
    people = People(turn_timeout=120.0)
    async with manager(tmp_path, speak) as rooms:
        await rooms.create(room_spec(people, max_turns=6))
        async with rooms.subscribe_live("talk") as events:
            with anyio.fail_after(GUARD):
                await speak.reached.wait()
            await rooms.join("talk", "Carol")
            with pytest.raises(RoomConflict, match="not your turn"):
                await rooms.pass_turn("talk", "carol")  # Bob is on turn 2
            speak.release.set()
            opened = await next_matching(events, turn_of("carol"))
            assert isinstance(opened, DeltaEvent) and opened.turn == 3
            # The page counts down to this: the room's deadline for her answer.
            assert opened.deadline is not None and opened.timestamp > 0
            assert 0 < opened.deadline - opened.timestamp <= 120_000
            await rooms.pass_turn("talk", "carol")
            # The room goes on at once with the next speaker, and comes back to her later.
            again = await next_matching(events, turn_of("carol"))
            assert isinstance(again, DeltaEvent) and again.turn == 5
            await rooms.say("talk", "carol", "Back: tea, then.")
        await rooms.wait("talk")
    transcript = assert_log_and_db_agree(tmp_path, "talk")
    assert [(m.agent_id, m.turn) for m in transcript] == [
        ("alice", 1), ("bob", 2), ("alice", 3), ("bob", 4), ("carol", 5), ("alice", 6),
    ]  # fmt: skip


class Writing:
    """A speaker that writes half a reply, then holds it until the test lets it go."""

    def __init__(self) -> None:
        self.written = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, agent_id: str, request: TurnRequest) -> TurnReply:
        report_delta("Half a ")
        report_delta("reply")
        self.written.set()
        await self.release.wait()
        report_delta(", whole.")
        return TurnReply(room_id=request.room_id, turn=request.turn, text="Half a reply, whole.")


@pytest.mark.anyio
async def test_an_observer_arriving_mid_reply_is_sent_the_reply_so_far(tmp_path: Path) -> None:
    speak = Writing()
    rooms = RoomManager(tmp_path, speak=speak, describe=direct_describer(personas()))
    spec = RoomSpec(id="talk", topic="Tea?", members=("alice", "bob"), limits=Limits(max_turns=1))
    async with rooms:
        await rooms.create(spec)
        with anyio.fail_after(GUARD):
            await speak.written.wait()
        async with rooms.subscribe_live("talk") as events:
            first = await next_matching(events, lambda e: isinstance(e, DeltaEvent))
            # The whole reply so far, placed at 0, stamped with when the turn began.
            assert isinstance(first, DeltaEvent)
            assert (first.text, first.at, first.agent_id) == ("Half a reply", 0, "alice")
            assert first.timestamp > 0
            speak.release.set()
            rest = await next_matching(events, lambda e: isinstance(e, DeltaEvent))
            assert isinstance(rest, DeltaEvent) and (rest.text, rest.at) == (", whole.", 12)
        await rooms.wait("talk")
