"""People in rooms, and replies that stream: joining, turns, deadlines, interjections, deltas."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import pytest

from mesh.agents.persona import PersonaAgent
from mesh.providers import ChatMessage, Completion, ProviderConfig, ProviderStreamCut
from mesh.rooms import (
    AgentJoinedEvent,
    AgentLeftEvent,
    DeltaEvent,
    ErrorEvent,
    InvalidRoomSpec,
    Limits,
    LiveEvent,
    Member,
    MessageEvent,
    People,
    RoomConflict,
    RoomEvent,
    RoomEvents,
    RoomManager,
    RoomSpec,
    RoomStatus,
    StopReason,
    TurnReply,
    TurnRequest,
    report_delta,
    role_persona,
)
from registry import AgentId

from ._helpers import GUARD, assert_log_and_db_agree, direct_describer, persona_agent, read_log

pytestmark = pytest.mark.anyio

#: The personas answer whoever spoke last, by name, so a test sees who was heard.
ECHOING = ("{speaker} said: {last}",)


def personas() -> list[PersonaAgent]:
    return [persona_agent("alice", *ECHOING), persona_agent("bob", *ECHOING)]


class Held:
    """A speaker that holds the turn ``at`` until the test lets it go."""

    def __init__(self, agents: Sequence[PersonaAgent], at: int = 0) -> None:
        self._agents = {agent.id: agent for agent in agents}
        self.at = at
        self.reached = anyio.Event()
        self.release = anyio.Event()
        self.requests: list[TurnRequest] = []

    async def __call__(self, agent_id: str, request: TurnRequest) -> TurnReply:
        self.requests.append(request)
        if request.turn == self.at:
            self.reached.set()
            await self.release.wait()
        return await self._agents[agent_id].take_turn(request, on_delta=report_delta)


def manager(data_dir: Path, speak: Held, *, resume: bool = True) -> RoomManager:
    return RoomManager(data_dir, speak=speak, describe=direct_describer(personas()), resume=resume)


def room_spec(people: People | None = None, **limits: object) -> RoomSpec:
    return RoomSpec(
        id="talk",
        topic="Tea or coffee?",
        members=("alice", "bob"),
        limits=Limits(retry_delay=0, **limits),  # type: ignore[arg-type]
        people=people or People(),
    )


async def next_matching(
    events: RoomEvents[LiveEvent] | RoomEvents[RoomEvent], wanted: Callable[[LiveEvent], bool]
) -> LiveEvent:
    with anyio.fail_after(GUARD):
        async for event in events:
            if wanted(event):
                return event
    raise AssertionError("the room ended first")


def turn_of(member: str) -> Callable[[LiveEvent], bool]:
    """The empty DELTA that opens ``member``'s turn."""
    return lambda e: isinstance(e, DeltaEvent) and e.agent_id == member and e.text == ""


async def test_a_person_joins_a_running_room_takes_a_turn_and_is_answered(
    tmp_path: Path,
) -> None:
    speak = Held(personas(), at=2)
    async with manager(tmp_path, speak) as rooms:
        await rooms.create(room_spec(max_turns=5))
        async with rooms.subscribe_live("talk") as events:
            with anyio.fail_after(GUARD):
                await speak.reached.wait()  # Bob is on turn 2: Carol joins meanwhile
            carol = await rooms.join("talk", "Carol")
            assert (carol.id, carol.kind, carol.role) == ("carol", "human", "person")
            speak.release.set()
            await next_matching(events, turn_of("carol"))
            assert await rooms.say("talk", "carol", "Milk <b>first</b>, obviously.") == {
                "status": "turn",
                "turn": 3,
                "member": "carol",
            }
            answer = await next_matching(
                events, lambda e: isinstance(e, MessageEvent) and e.turn == 4
            )
        snapshot = await rooms.wait("talk")
    assert isinstance(answer, MessageEvent) and answer.name == "Alice"
    assert answer.text == "Carol said: Milk <b>first</b>, obviously."
    heard = speak.requests[-2].messages[-1]  # Alice's view of turn 3, at turn 4
    assert heard == ChatMessage(role="user", content="Milk <b>first</b>, obviously.", name="Carol")
    assert (
        "other AI agents: Bob (participant), and with a person: Carol." in speak.requests[-2].system
    )
    assert snapshot.stop_reason is StopReason.MAX_TURNS
    assert [m.id for m in snapshot.room.members] == ["alice", "bob", "carol"]
    transcript = assert_log_and_db_agree(tmp_path, "talk")
    assert [m.agent_id for m in transcript] == ["alice", "bob", "carol", "alice", "bob"]
    joined = [
        e for e in read_log(tmp_path / "rooms" / "talk.jsonl") if isinstance(e, AgentJoinedEvent)
    ]
    assert joined[-1].member == Member(
        id=AgentId("carol"), name="Carol", role="person", kind="human"
    )
    assert not any(isinstance(e, DeltaEvent) for e in read_log(tmp_path / "rooms" / "talk.jsonl"))


async def test_an_interjection_waits_for_the_turn_in_flight_and_does_not_move_the_turn(
    tmp_path: Path,
) -> None:
    speak = Held(personas(), at=1)
    async with manager(tmp_path, speak) as rooms:
        await rooms.create(room_spec(max_turns=4))
        await rooms.join("talk", "Dave")
        with anyio.fail_after(GUARD):
            await speak.reached.wait()  # Alice is writing turn 1
        said = await rooms.say("talk", "dave", "Sorry to butt in: decaf?")
        assert said["status"] == "queued"
        with pytest.raises(RoomConflict, match="still waiting"):
            await rooms.say("talk", "dave", "Hello?")
        speak.release.set()
        async with rooms.subscribe("talk") as events:
            await next_matching(events, lambda e: isinstance(e, MessageEvent) and e.turn == 3)
        await rooms.pause("talk")
    # Dave's seat comes after Bob's, so the order is Alice, (Dave between turns), Bob.
    transcript = assert_log_and_db_agree(tmp_path, "talk")
    assert [(m.agent_id, m.interjection) for m in transcript[:3]] == [
        ("alice", False),
        ("dave", True),
        ("bob", False),
    ]
    assert transcript[2].text == "Dave said: Sorry to butt in: decaf?"
    async with manager(tmp_path, speak, resume=False) as rooms:
        stored = await rooms.transcript("talk")
        assert [m.interjection for m in stored[:3]] == [False, True, False]
        assert (await rooms.get("talk")).room.member("dave").kind == "human"


@pytest.mark.parametrize("at_timeout", ["skip", "pause"])
async def test_a_person_who_does_not_answer_is_skipped_or_the_room_pauses(
    tmp_path: Path, at_timeout: str
) -> None:
    # A short deadline in the room under test; the test itself waits on events.
    people = People(turn_timeout=0.05, at_timeout=at_timeout)  # type: ignore[arg-type]
    async with manager(tmp_path, Held(personas())) as rooms:
        await rooms.create(room_spec(people, max_turns=5))
        await rooms.join("talk", "Erin")
        snapshot = await rooms.wait("talk") if at_timeout == "pause" else None
        if snapshot is not None:
            assert snapshot.status is RoomStatus.PAUSED
            assert snapshot.detail.startswith("Erin did not answer turn")
            return
        snapshot = await rooms.wait("talk")
    events = read_log(tmp_path / "rooms" / "talk.jsonl")
    left = [e for e in events if isinstance(e, AgentLeftEvent)]
    assert len(left) == 1 and left[0].agent_id == "erin" and "did not answer turn" in left[0].reason
    transcript = [e for e in events if isinstance(e, MessageEvent)]
    assert {m.agent_id for m in transcript} == {"alice", "bob"} and len(transcript) == 5
    assert snapshot.stop_reason is StopReason.MAX_TURNS


async def test_who_may_join_and_what_they_may_say(tmp_path: Path) -> None:
    async with manager(tmp_path, Held(personas(), at=1)) as rooms:
        await rooms.create(room_spec(People(max_people=1, interject=False)))
        with pytest.raises(RoomConflict, match="is an agent"):
            await rooms.join("talk", "Alice")
        with pytest.raises(InvalidRoomSpec, match="visible character"):
            await rooms.join("talk", "\x1b\x07 \n\t")
        first = await rooms.join("talk", "Fay")
        assert await rooms.join("talk", "Fay") == first  # a second tab: the same seat
        with pytest.raises(RoomConflict, match="full"):
            await rooms.join("talk", "Gus")
        with pytest.raises(InvalidRoomSpec, match="empty"):
            await rooms.say("talk", "fay", "   ")
        with pytest.raises(InvalidRoomSpec, match="not a person"):
            await rooms.say("talk", "bob", "I am Bob")
        with pytest.raises(RoomConflict, match="no interjections"):
            await rooms.say("talk", "fay", "out of turn")
        await rooms.leave("talk", "fay")
        await rooms.stop("talk")
        with pytest.raises(RoomConflict, match="stopped"):
            await rooms.say("talk", "fay", "too late")
    kinds = [type(e).__name__ for e in read_log(tmp_path / "rooms" / "talk.jsonl")]
    assert kinds.count("AgentJoinedEvent") == 3 and kinds.count("AgentLeftEvent") == 1


class CutOnce:
    """A provider whose first streamed reply is cut off after one piece."""

    def __init__(self) -> None:
        self.config = ProviderConfig(provider="scripted", script=("unused",))
        self.calls = 0

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        system: str | None = None,
        on_delta: Callable[[str], None] | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> Completion:
        self.calls += 1
        assert on_delta is not None
        on_delta("Half a ")
        await anyio.lowlevel.checkpoint()
        if self.calls == 1:
            raise ProviderStreamCut("the connection failed", provider="x", model="m", received=7)
        on_delta("reply, whole.")
        return Completion(text="Half a reply, whole.", model="m", provider="x")

    async def aclose(self) -> None:
        return None


async def test_observers_see_a_reply_written_and_a_cut_reply_is_never_a_message(
    tmp_path: Path,
) -> None:
    config = ProviderConfig(provider="scripted", script=("unused",))
    cutter = PersonaAgent("alice", role_persona("critic", config), name="Alice", provider=CutOnce())
    speak = Held([cutter, persona_agent("bob", *ECHOING)], at=1)
    async with manager(tmp_path, speak) as rooms:
        await rooms.create(room_spec(max_turns=2))
        with anyio.fail_after(GUARD):
            await speak.reached.wait()  # turn 1 has begun; watch from here
        seen: list[LiveEvent] = []
        async with rooms.subscribe_live("talk") as events, rooms.subscribe("talk") as plain:
            speak.release.set()

            def record(event: LiveEvent) -> bool:
                seen.append(event)
                return isinstance(event, MessageEvent)

            await next_matching(events, record)
            recorded = [e async for e in plain]
    shown = (DeltaEvent, ErrorEvent, MessageEvent)
    pieces = [(type(e).__name__, getattr(e, "text", "")) for e in seen if isinstance(e, shown)]
    assert pieces == [
        ("DeltaEvent", ""),  # watching mid-turn, an observer is told whose turn it is
        ("DeltaEvent", "Half a "),  # first attempt: the stream is cut after this
        ("ErrorEvent", ""),
        ("DeltaEvent", ""),  # the turn is asked again
        ("DeltaEvent", "Half a "),
        ("DeltaEvent", "reply, whole."),
        ("MessageEvent", "Half a reply, whole."),
    ]
    error = next(e for e in seen if isinstance(e, ErrorEvent))
    assert "cut off mid-stream after 7 characters" in error.message
    assert not any(isinstance(e, DeltaEvent) for e in recorded)
    transcript = assert_log_and_db_agree(tmp_path, "talk")
    assert transcript[0].text == "Half a reply, whole."


async def test_a_seat_named_in_the_spec_is_taken_by_speaking(tmp_path: Path) -> None:
    seat = Member(id=AgentId("cz"), name="Carol Z", kind="human")
    spec = RoomSpec(
        id="talk",
        topic="Tea or coffee?",
        members=("alice", seat, "bob"),
        limits=Limits(retry_delay=0, max_turns=4),
    )
    speak = Held(personas(), at=2)
    async with manager(tmp_path, speak) as rooms:
        created = await rooms.create(spec)
        assert created.room.member("cz") == Member(
            id=AgentId("cz"), name="Carol Z", role="person", kind="human"
        )
        with anyio.fail_after(GUARD):
            await speak.reached.wait()  # Carol Z is away, so Bob has turn 2
        assert (await rooms.say("talk", "cz", "Hello, both."))["status"] == "queued"
        speak.release.set()
        snapshot = await rooms.wait("talk")
    transcript = assert_log_and_db_agree(tmp_path, "talk")
    assert [(m.agent_id, m.name) for m in transcript][:3] == [
        ("alice", "Alice"),
        ("bob", "Bob"),
        ("cz", "Carol Z"),
    ]
    assert [m.id for m in snapshot.room.members] == ["alice", "cz", "bob"]
