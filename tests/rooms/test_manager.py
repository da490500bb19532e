"""The RoomManager: rooms created, watched, paused, resumed, stopped, and resumed after a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh import AgentUnavailable
from mesh.demo.fixtures import DEMO_TOPIC, REVIEW_TASK, demo_chat, demo_review
from mesh.rooms import (
    AgentJoinedEvent,
    AgentLeftEvent,
    ErrorEvent,
    InvalidRoomSpec,
    Limits,
    Member,
    MessageEvent,
    ObserverTooSlow,
    ResumedEvent,
    RoomConflict,
    RoomEvent,
    RoomManager,
    RoomNotFound,
    RoomSpec,
    RoomStatus,
    StoppedEvent,
    StopReason,
    TurnReply,
    TurnRequest,
)
from registry import AgentId, Registry

from ._helpers import (
    GUARD,
    Speak,
    assert_log_and_db_agree,
    clock,
    direct_describer,
    direct_speaker,
    persona_agent,
    read_log,
    seat_agent,
    store_state,
)

pytestmark = pytest.mark.anyio


class Gate:
    """Wraps a speaker: the turn ``at`` waits until the test opens the gate."""

    def __init__(self, speak: Speak, at: int) -> None:
        self._speak = speak
        self.at = at
        self.reached = anyio.Event()
        self.open = anyio.Event()

    async def __call__(self, agent_id: str, request: TurnRequest) -> TurnReply:
        if request.turn == self.at and not self.open.is_set():
            self.reached.set()
            await self.open.wait()
        return await self._speak(agent_id, request)

    async def wait_reached(self) -> None:
        with anyio.fail_after(GUARD):
            await self.reached.wait()


def chat_speaker() -> Speak:
    return direct_speaker(seat_agent(seat) for seat in demo_chat())


def chat_manager(data_dir: Path, speak: Speak | None = None, **kwargs: Any) -> RoomManager:
    """A manager for the demo chat: Alice and Bob, in process."""
    describe = direct_describer(seat_agent(seat) for seat in demo_chat())
    return RoomManager(data_dir, speak=speak or chat_speaker(), describe=describe, **kwargs)


def spec(**overrides: object) -> RoomSpec:
    fields: dict[str, object] = {
        "topic": DEMO_TOPIC,
        "members": ("alice", "bob"),
        "limits": Limits(retry_delay=0),
    }
    return RoomSpec(**(fields | overrides))  # type: ignore[arg-type]


async def finish(rooms: RoomManager, room_id: str) -> list[MessageEvent]:
    with anyio.fail_after(GUARD):
        await rooms.wait(room_id)
    return await rooms.transcript(room_id)


async def test_two_scripted_agents_exchange_twelve_messages_and_say_goodbye(tmp_path: Path) -> None:
    async with chat_manager(tmp_path, clock=clock()) as rooms:
        created = await rooms.create(spec(id="demo"))
        assert (created.status, created.last_seq) == (RoomStatus.RUNNING, 3)  # WELCOME, 2 joined
        transcript = await finish(rooms, "demo")
        snapshot = await rooms.get("demo")
        assert "demo" not in rooms._table.rooms  # finished and unwatched: only the store holds it
    assert len(transcript) == 12
    assert [m.name for m in transcript] == ["Alice", "Bob"] * 6
    assert [m.role for m in transcript[:2]] == ["architect", "critic"]
    assert transcript[1].text.startswith("Boundaries inside a monolith erode, Alice.")
    assert transcript[-1].text.endswith("Thanks, Alice. Goodbye.")
    assert (snapshot.status, snapshot.stop_reason) == (RoomStatus.STOPPED, StopReason.GOODBYE)
    assert snapshot.detail == "Bob said goodbye at turn 12"
    assert assert_log_and_db_agree(tmp_path, "demo") == transcript
    kinds = [e.__struct_config__.tag for e in read_log(tmp_path / "rooms" / "demo.jsonl")]
    assert kinds == ["WELCOME", "AGENT_JOINED", "AGENT_JOINED", *["MESSAGE"] * 12, "STOPPED"]


async def test_the_review_loop_converges_within_three_rounds(tmp_path: Path) -> None:
    architect, builder = demo_review()
    speak = direct_speaker([seat_agent(architect), seat_agent(builder)])
    review = RoomSpec(topic=REVIEW_TASK, members=("architect", "builder"), mode="review")
    async with RoomManager(tmp_path, speak=speak) as rooms:
        room = await rooms.create(review)
        assert room.room.max_turns == 3
        transcript = await finish(rooms, room.id)
        snapshot = await rooms.get(room.id)
    assert [(m.agent_id, m.step) for m in transcript] == [
        ("architect", "propose"),
        ("builder", "implement"),
        ("architect", "critique"),
        ("architect", "verify"),
        ("builder", "implement"),
        ("architect", "critique"),
        ("architect", "verify"),
    ]
    assert "- [ ] a test covers both outputs" in transcript[2].text  # unchecked on the first pass
    assert transcript[-1].text == "Verified: meets scope & checklist."
    assert snapshot.stop_reason is StopReason.CONVERGED
    assert snapshot.detail == "architect verified at turn 7"


@pytest.mark.parametrize(
    ("builder_script", "reason", "turns"),
    [(("same diff",), StopReason.NO_IMPROVEMENT, 5), (("diff {turn}",), StopReason.MAX_TURNS, 10)],
    ids=["identical-diffs", "never-verified"],
)
async def test_the_review_loop_stops_without_verification(
    tmp_path: Path, builder_script: tuple[str, ...], reason: StopReason, turns: int
) -> None:
    architect = persona_agent(
        "ada", "plan", "critique {turn}", "Not yet ({turn}).", role="architect"
    )
    builder = persona_agent("ben", *builder_script, role="builder")
    review = RoomSpec(topic=REVIEW_TASK, members=("ada", "ben"), mode="review")
    async with RoomManager(tmp_path, speak=direct_speaker([architect, builder])) as rooms:
        room = await rooms.create(review)
        transcript = await finish(rooms, room.id)
        assert (await rooms.get(room.id)).stop_reason is reason
    assert len(transcript) == turns


async def test_observers_see_history_then_live_events_in_order(tmp_path: Path) -> None:
    gate = Gate(chat_speaker(), at=5)
    async with chat_manager(tmp_path, gate) as rooms:
        await rooms.create(spec(id="watched"))
        await gate.wait_reached()
        seen: list[RoomEvent] = []
        late: list[RoomEvent] = []
        with anyio.fail_after(GUARD):
            async with (
                rooms.subscribe("watched") as events,
                rooms.subscribe("watched", since=6) as tail,
            ):
                gate.open.set()
                seen.extend([event async for event in events])
                late.extend([event async for event in tail])
        recorded = await rooms.events("watched")
    assert seen == recorded  # all of it, in order, each once, ending with the stop
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert isinstance(seen[-1], StoppedEvent)
    assert late == recorded[6:]


async def test_watching_a_finished_room_replays_it_and_ends(tmp_path: Path) -> None:
    async with chat_manager(tmp_path) as rooms:
        await rooms.create(spec(id="done"))
        await finish(rooms, "done")
    async with chat_manager(tmp_path) as rooms:
        with anyio.fail_after(GUARD):
            async with rooms.subscribe("done") as events:
                replay = [event async for event in events]
    assert len(replay) == 16 and isinstance(replay[-1], StoppedEvent)


async def test_an_observer_that_falls_behind_is_told_to_resubscribe(tmp_path: Path) -> None:
    gate = Gate(chat_speaker(), at=1)
    async with chat_manager(tmp_path, gate) as rooms:
        await rooms.create(spec(id="busy"))
        await gate.wait_reached()
        with anyio.fail_after(GUARD):
            async with rooms.subscribe("busy", since=3, max_buffer=2) as events:
                gate.open.set()
                await rooms.wait("busy")
                with pytest.raises(ObserverTooSlow, match="since="):
                    async for _ in events:
                        pass


async def test_pause_resume_stop(tmp_path: Path) -> None:
    gate = Gate(chat_speaker(), at=3)
    async with chat_manager(tmp_path, gate) as rooms:
        await rooms.create(spec(id="ctl"))
        await gate.wait_reached()
        paused = await rooms.pause("ctl")
        assert (paused.status, paused.stop_reason, paused.current_turn) == (
            RoomStatus.PAUSED,
            StopReason.PAUSED,
            2,
        )
        assert (await rooms.pause("ctl")).status is RoomStatus.PAUSED  # again: no change
        gate.open.set()
        resumed = await rooms.resume("ctl")
        assert resumed.status is RoomStatus.RUNNING
        assert (await rooms.resume("ctl")).status is RoomStatus.RUNNING  # again: no change
        stopped = await rooms.stop("ctl")
        assert stopped.status is RoomStatus.STOPPED and stopped.stop_reason is StopReason.STOPPED
        assert (await rooms.stop("ctl")) == stopped
        with pytest.raises(RoomConflict, match="cannot be resumed"):
            await rooms.resume("ctl")
        with pytest.raises(RoomConflict, match="only a running room can be paused"):
            await rooms.pause("ctl")
        events = await rooms.events("ctl")
    resumes = [e for e in events if isinstance(e, ResumedEvent)]
    stops = [e.reason for e in events if isinstance(e, StoppedEvent)]
    assert [r.next_turn for r in resumes] == [3]
    assert stops == [StopReason.PAUSED, StopReason.STOPPED]
    assert_log_and_db_agree(tmp_path, "ctl")


async def test_a_paused_room_can_be_stopped(tmp_path: Path) -> None:
    gate = Gate(chat_speaker(), at=2)
    async with chat_manager(tmp_path, gate) as rooms:
        await rooms.create(spec(id="p"))
        await gate.wait_reached()
        await rooms.pause("p")
        stopped = await rooms.stop("p")
    assert (stopped.status, stopped.stop_reason) == (RoomStatus.STOPPED, StopReason.STOPPED)


async def test_the_manager_must_be_entered(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="async with RoomManager"):
        await chat_manager(tmp_path).create(spec())


async def test_unknown_rooms_taken_ids_and_listing(tmp_path: Path) -> None:
    gate = Gate(chat_speaker(), at=1)
    async with chat_manager(tmp_path, gate) as rooms:
        with pytest.raises(RoomNotFound, match="no room 'nope'"):
            await rooms.get("nope")
        with pytest.raises(RoomNotFound):
            await rooms.pause("nope")
        first = await rooms.create(spec(id="one"))
        second = await rooms.create(spec())
        assert second.id.startswith("room-")
        with pytest.raises(RoomConflict, match="already exists"):
            await rooms.create(spec(id="one"))
        listed = await rooms.list()
        assert [s.id for s in listed] == ["one", second.id]
        assert [s.id for s in await rooms.list(RoomStatus.RUNNING)] == ["one", second.id]
        assert listed[0].room == first.room
        await rooms.stop("one")
        assert [s.id for s in await rooms.list(RoomStatus.STOPPED)] == ["one"]


async def test_members_are_described_and_must_be_online(tmp_path: Path) -> None:
    async def describe(agent_id: str) -> Member:
        return Member(id=agent_id, name=f"Dr {agent_id}", role="critic", awareness="high")  # type: ignore[arg-type]

    online = {"alice": True, "bob": True, "zed": False}
    async with RoomManager(
        tmp_path, speak=Gate(chat_speaker(), at=1), describe=describe, presence=online.__getitem__
    ) as rooms:
        members = (Member(id="alice", name="Alice", role="architect"), "bob")  # type: ignore[arg-type]
        room = (await rooms.create(spec(members=members))).room
        assert room.members == (
            Member(id="alice", name="Alice", role="architect"),  # type: ignore[arg-type]
            Member(id="bob", name="Dr bob", role="critic", awareness="high"),  # type: ignore[arg-type]
        )
        with pytest.raises(InvalidRoomSpec, match="member 'zed' is not online"):
            await rooms.create(spec(members=("alice", "zed")))


async def test_a_room_abandoned_mid_turn_resumes_at_the_next_turn_each_turn_once(
    tmp_path: Path,
) -> None:
    gate = Gate(chat_speaker(), at=6)
    async with chat_manager(tmp_path, gate) as rooms:
        await rooms.create(spec(id="crash"))
        await gate.wait_reached()
    # The manager is gone mid-turn (as in a crash): the room is still "running".
    assert store_state(tmp_path, "crash").status is RoomStatus.RUNNING
    assert store_state(tmp_path, "crash").current_turn == 5
    async with chat_manager(tmp_path) as rooms:
        transcript = await finish(rooms, "crash")
        snapshot = await rooms.get("crash")
    assert snapshot.stop_reason is StopReason.GOODBYE
    assert [m.turn for m in transcript] == list(range(1, 13))
    assert assert_log_and_db_agree(tmp_path, "crash") == transcript
    # the same words as a room that never stopped
    async with chat_manager(tmp_path / "clean") as rooms:
        await rooms.create(spec(id="clean"))
        clean = await finish(rooms, "clean")
    assert [m.text for m in clean] == [m.text for m in transcript]
    resumed = [
        e for e in read_log(tmp_path / "rooms" / "crash.jsonl") if isinstance(e, ResumedEvent)
    ]
    assert [e.next_turn for e in resumed] == [6]


async def test_a_room_stopped_by_errors_can_be_resumed(tmp_path: Path) -> None:
    failing = True

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        if failing:
            raise RuntimeError("provider down")
        return TurnReply(room_id=request.room_id, turn=request.turn, text=f"t{request.turn}")

    async with RoomManager(tmp_path, speak=speak) as rooms:
        room = await rooms.create(spec(limits=Limits(max_turns=2, retry_delay=0)))
        with anyio.fail_after(GUARD):
            snapshot = await rooms.wait(room.id)
        assert snapshot.stop_reason is StopReason.ERROR
        assert snapshot.detail == "turn 1 failed 3 times in a row: RuntimeError: provider down"
        failing = False
        await rooms.resume(room.id)
        transcript = await finish(rooms, room.id)
        assert (await rooms.get(room.id)).stop_reason is StopReason.MAX_TURNS
    assert [m.text for m in transcript] == ["t1", "t2"]


async def test_after_a_restart_a_room_waits_for_members_not_yet_back_instead_of_failing(
    tmp_path: Path,
) -> None:
    """The daemon's registry is empty when its manager is made and resumes rooms."""

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        if registry.get(AgentId(agent_id)) is None:
            raise AgentUnavailable(f"no agent {agent_id!r} is registered")
        return TurnReply(room_id=request.room_id, turn=request.turn, text=f"t{request.turn}")

    registry = Registry()
    for agent in ("alice", "bob"):
        registry.register({"id": agent, "name": agent}, anyio.current_time())
    gate = Gate(speak, at=2)
    async with RoomManager(tmp_path, speak=gate, registry=registry) as rooms:
        room = await rooms.create(spec(limits=Limits(max_turns=4, retry_delay=0)))
        await gate.wait_reached()  # the process dies mid-turn 2
    registry = Registry()  # the restarted daemon's: nobody has reconnected yet
    async with (
        RoomManager(tmp_path, speak=speak, registry=registry) as rooms,
        rooms.subscribe(room.id, since=room.last_seq) as events,
    ):
        with anyio.fail_after(GUARD):
            async for event in events:
                if isinstance(event, AgentLeftEvent) and event.agent_id == "bob":
                    break  # the room waits for its members rather than failing turns
        for agent in ("alice", "bob"):
            registry.register({"id": agent, "name": agent}, anyio.current_time())
        with anyio.fail_after(GUARD):
            snapshot = await rooms.wait(room.id)
    logged = read_log(tmp_path / "rooms" / f"{room.id}.jsonl")
    assert snapshot.stop_reason is StopReason.MAX_TURNS
    assert not [e for e in logged if isinstance(e, ErrorEvent)]
    assert {e.agent_id for e in logged if isinstance(e, AgentJoinedEvent)} == {"alice", "bob"}
