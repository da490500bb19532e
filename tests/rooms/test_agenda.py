"""A room with an agenda: each turn names the current point, going round on a point moves the
room to the next (a ``POINT`` event), it ends only on the last; the bounds; a restart keeps it.
On both backends."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import anyio
import anyio.lowlevel
import msgspec
import pytest

from mesh.rooms import (
    ExitRules,
    InvalidRoomSpec,
    Limits,
    Member,
    PointEvent,
    RoomManager,
    RoomSpec,
    StopReason,
    TurnReply,
    TurnRequest,
    decode_room_spec,
    format_event,
    transcript_markdown,
)
from mesh.rooms._engine import RoomRunner
from mesh.rooms._state import RoomState
from registry import AgentId

from ._helpers import GUARD, journal, make_room, read_log

pytestmark = pytest.mark.anyio

AGENDA = ("the cost", "the light", "the water")

#: Ada says nearly the same thing twice on the first point, Ben on the second, Ada on the
#: last: each time the loop guard (0.8) sees it.
ADA = (
    "Herbs are the easiest start for a small balcony garden.",
    "Herbs are the easiest start for any small balcony garden.",
    "Herbs are the easiest start for a small balcony garden.",  # a new point: not a loop
    "Water them every morning before work.",
    "Water them every morning before work, yes.",
)
BEN = (
    "Costs add up: pots, soil, water.",
    "Light matters more than cost on a balcony.",
    "Light matters more than cost on any balcony.",
    "A drip tray saves half the water.",
)


class Speakers:
    """Answers each member from its own list, in order, and keeps every request."""

    def __init__(self, scripts: Mapping[str, Iterable[str]]) -> None:
        self._queues = {agent: iter(texts) for agent, texts in scripts.items()}
        self.requests: list[TurnRequest] = []

    async def __call__(self, agent_id: str, request: TurnRequest) -> TurnReply:
        await anyio.lowlevel.checkpoint()
        self.requests.append(request)
        text = next(self._queues[agent_id])
        return TurnReply(room_id=request.room_id, turn=request.turn, text=text)


def guarded(**limits: int) -> dict[str, object]:
    return {
        "limits": Limits(max_turns=20, retry_delay=0, **limits),
        "rules": ExitRules(repetition_threshold=0.8),
    }


async def test_going_round_on_a_point_moves_the_room_on_and_it_ends_on_the_last() -> None:
    speak = Speakers({"ada": ADA, "ben": BEN})
    room = make_room("ada", "ben", agenda=AGENDA, **guarded())  # type: ignore[arg-type]
    log, recorder = journal(room)
    runner = RoomRunner(log, speak)
    with anyio.fail_after(GUARD):
        await runner.run()
    assert recorder.types() == [
        "POINT", "MESSAGE", "MESSAGE", "MESSAGE",
        "POINT", "MESSAGE", "MESSAGE", "MESSAGE",
        "POINT", "MESSAGE", "MESSAGE", "MESSAGE",
        "STOPPED",
    ]  # fmt: skip
    points = [e for e in recorder.events if isinstance(e, PointEvent)]
    assert [(p.index, p.point, p.turn) for p in points] == [
        (0, "the cost", 0),
        (1, "the light", 3),
        (2, "the water", 6),
    ]
    assert points[0].detail == ""
    assert "turn 3 (Ada) is 0.89 alike to their turn 1" in points[1].detail
    assert "turn 6 (Ben)" in points[2].detail
    # The last point ends the room, as the guard ends a room without an agenda.
    assert runner.verdict is not None and runner.verdict.reason is StopReason.NO_IMPROVEMENT
    assert "turn 9 (Ada)" in runner.verdict.detail
    # Each turn names the point the room is on.
    named = [(r.turn, r.system) for r in speak.requests]
    for turn, system in named:
        point = AGENDA[(turn - 1) // 3]
        assert f"Now the point is: {point}. " in system, (turn, system)
    # A new point starts afresh: its first speaker is shown the opening alone, and speaks
    # first on it.
    fourth = speak.requests[3]
    assert fourth.turn == 4 and len(fourth.messages) == 1
    assert "Now the point is: the light. You speak first" in fourth.system
    assert len(speak.requests[4].messages) == 2
    # A new point is scored afresh: its first message has no one to be alike to yet.
    messages = recorder.messages()
    assert [messages[n].score for n in (0, 3, 6)] == [0.0, 0.0, 0.0]


async def test_without_an_agenda_the_same_replies_end_the_room_at_the_first_loop() -> None:
    speak = Speakers({"ada": ADA, "ben": BEN})
    room = make_room("ada", "ben", **guarded())  # type: ignore[arg-type]
    log, recorder = journal(room)
    runner = RoomRunner(log, speak)
    with anyio.fail_after(GUARD):
        await runner.run()
    assert recorder.types() == ["MESSAGE"] * 3 + ["STOPPED"]
    assert runner.verdict is not None and runner.verdict.reason is StopReason.NO_IMPROVEMENT
    assert all("the point" not in r.system for r in speak.requests)


async def test_a_limit_of_turns_per_point_moves_on_and_ends_after_the_last() -> None:
    words = ("one", "two", "three", "four", "five", "six")
    speak = Speakers(
        {"ada": [f"Ada says {w}." for w in words], "ben": [f"Ben: {w}?" for w in words]}
    )
    room = make_room(
        "ada",
        "ben",
        agenda=("the cost", "the light"),
        limits=Limits(max_turns=20, retry_delay=0, turns_per_point=2),
    )
    log, recorder = journal(room)
    runner = RoomRunner(log, speak)
    with anyio.fail_after(GUARD):
        await runner.run()
    assert recorder.types() == [
        "POINT",
        "MESSAGE",
        "MESSAGE",
        "POINT",
        "MESSAGE",
        "MESSAGE",
        "STOPPED",
    ]
    moved = recorder.events[3]
    assert (
        isinstance(moved, PointEvent) and moved.detail == "2 turns on point 1: the limit per point"
    )
    assert runner.verdict is not None and runner.verdict.reason is StopReason.MAX_TURNS
    assert runner.verdict.detail == "2 turns on point 2, the agenda's last: the limit per point"


@pytest.mark.parametrize(
    ("agenda", "mode", "words"),
    [
        (tuple(f"point {n}" for n in range(13)), "chat", "at most 12 points"),
        (("fine", "x" * 201), "chat", "agenda point 2 has 201 characters; at most 200"),
        (("fine", "  "), "chat", "agenda point 2 is empty"),
        (("fine",), "review", "an agenda is for a chat"),
    ],
)
def test_an_agenda_past_its_bounds_is_refused(
    agenda: tuple[str, ...], mode: str, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        RoomSpec(topic="balconies", members=("ada", "ben"), mode=mode, agenda=agenda)  # type: ignore[arg-type]
    body = {"topic": "balconies", "members": ["ada", "ben"], "mode": mode, "agenda": list(agenda)}
    with pytest.raises(InvalidRoomSpec, match="agenda"):
        decode_room_spec(msgspec.json.encode(body))
    assert RoomSpec(topic="t", members=("a", "b"), agenda=("x" * 200,) * 12).agenda[11] == "x" * 200


async def _describe(agent_id: str) -> Member:
    return Member(id=AgentId(agent_id), name=agent_id.capitalize(), role="participant")


async def test_a_restarted_room_keeps_its_agenda_and_goes_on_from_its_point(
    tmp_path: Path,
) -> None:
    spec = RoomSpec(
        topic="balconies",
        members=("ada", "ben"),
        agenda=AGENDA,
        limits=Limits(max_turns=20, retry_delay=0),
        rules=ExitRules(repetition_threshold=0.8),
    )
    reached = anyio.Event()
    first = Speakers({"ada": ADA, "ben": BEN[:3]})

    async def until_turn_six(agent_id: str, request: TurnRequest) -> TurnReply:
        if request.turn == 6:  # on the second point: the daemon goes down here
            reached.set()
            await anyio.sleep_forever()
        return await first(agent_id, request)

    describe = _describe
    async with RoomManager(tmp_path, speak=until_turn_six, describe=describe) as rooms:
        room = await rooms.create(spec)
        with anyio.fail_after(GUARD):
            await reached.wait()
    # Reopened (a restart): the room resumes at turn 6, still on the second point.
    second = Speakers({"ada": ADA[3:], "ben": BEN[2:]})
    async with RoomManager(tmp_path, speak=second, describe=describe) as again:
        with anyio.fail_after(GUARD):
            async with again.subscribe_live(room.id) as events:
                async for _ in events:
                    pass
        snapshot = await again.get(room.id)
    assert snapshot.room.agenda == AGENDA
    assert second.requests[0].turn == 6
    assert "Now the point is: the light. " in second.requests[0].system
    logged = read_log(tmp_path / "rooms" / f"{room.id}.jsonl")
    assert [e.index for e in logged if isinstance(e, PointEvent)] == [0, 1, 2]
    state = RoomState.from_events(logged)
    assert state.point == 2 and snapshot.stop_reason is StopReason.NO_IMPROVEMENT


def test_the_cli_and_the_markdown_show_each_point() -> None:
    room = make_room("ada", "ben", agenda=AGENDA)
    moved = PointEvent(
        room_id=room.id, seq=5, timestamp=0, index=1, point="the light", turn=3, detail="alike"
    )
    assert format_event(moved, room=room).endswith("next point, 2 of 3: the light (alike)")
    state = RoomState(room=room)
    markdown = transcript_markdown(state.snapshot(), [moved])
    assert "- Agenda: the cost; the light; the water" in markdown
    assert "## Next point, 2 of 3: the light (alike)" in markdown


async def test_the_turn_prompt_can_close_the_last_message_instead_of_the_system_prompt() -> None:
    speak = Speakers({"ada": ADA, "ben": BEN})
    room = msgspec.structs.replace(
        make_room("ada", "ben", agenda=AGENDA, limits=Limits(max_turns=2, reply_tokens=20)),
        turn_prompt="message",
    )
    log, _ = journal(room)
    with anyio.fail_after(GUARD):
        await RoomRunner(log, speak).run()
    first, second = speak.requests
    assert "Now the point is" not in first.system + second.system
    opening = first.messages[-1].content
    assert opening.startswith("Discussion topic: tabs or spaces")
    assert opening.endswith(
        "Now the point is: the cost. You speak first: what is your view? "
        "Reply in at most 12 words, ending with a full sentence."
    )
    answered = second.messages[-1]
    assert answered.name == "Ada" and answered.content == (
        f"{ADA[0]}\n\nNow the point is: the cost. Answer Ada: agree or disagree, and say why. "
        "Reply in at most 12 words, ending with a full sentence."
    )
    with pytest.raises(InvalidRoomSpec, match="turn_prompt"):
        decode_room_spec({"topic": "t", "members": ["a", "b"], "turn_prompt": "footnote"})
