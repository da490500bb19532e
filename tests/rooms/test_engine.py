"""The engine with speakers in process: every exit rule reached by a running room,
stale replies dropped, failures retried, pause and stop, members leaving and coming back."""

from __future__ import annotations

import anyio
import pytest

from mesh import AgentUnavailable, CallTimeout
from mesh.rooms import (
    ErrorEvent,
    ExitRules,
    Limits,
    RoomEvent,
    RoomId,
    RoomStatus,
    StoppedEvent,
    StopReason,
    TurnReply,
    TurnRequest,
)
from mesh.rooms._engine import Journal, RoomRunner
from mesh.rooms._replica import RoomLeaseLost
from mesh.rooms._state import RoomState
from registry import AgentId

from ._helpers import (
    GUARD,
    direct_speaker,
    journal,
    lines,
    make_room,
    persona_agent,
    scripted_speaker,
)

pytestmark = pytest.mark.anyio


async def run(runner: RoomRunner) -> None:
    with anyio.fail_after(GUARD):
        await runner.run()


async def test_two_agents_talk_until_the_turn_limit() -> None:
    room = make_room(limits=Limits(max_turns=12, retry_delay=0))
    agents = [
        persona_agent("alice", *lines("tabs", 6, "A")),
        persona_agent("bob", *lines("spaces", 6, "B")),
    ]
    log, recorder = journal(room)
    runner = RoomRunner(log, direct_speaker(agents))
    await run(runner)
    messages = recorder.messages()
    assert [m.turn for m in messages] == list(range(1, 13))
    assert [m.agent_id for m in messages] == ["alice", "bob"] * 6
    assert messages[0].text == "A 1: tabs" and messages[-1].text == "B 6: spaces"
    assert messages[0].score == 0.0 and 0 < messages[1].score < 1
    assert runner.verdict is not None and runner.verdict.reason is StopReason.MAX_TURNS
    stopped = recorder.events[-1]
    assert isinstance(stopped, StoppedEvent)
    assert (stopped.reason, stopped.turn) == (StopReason.MAX_TURNS, 12)
    assert log.state.status is RoomStatus.STOPPED and log.state.current_turn == 12
    assert [e.seq for e in recorder.events] == list(range(1, len(recorder.events) + 1))


async def test_three_agents_take_turns_in_order() -> None:
    room = make_room("alice", "bob", "carol", limits=Limits(max_turns=9, retry_delay=0))
    agents = [persona_agent(name, *lines(name, 3, name)) for name in ("alice", "bob", "carol")]
    log, recorder = journal(room)
    await run(RoomRunner(log, direct_speaker(agents)))
    assert [m.agent_id for m in recorder.messages()] == ["alice", "bob", "carol"] * 3
    # each saw its own words as assistant, the others' as named users
    carol_last = agents[2].provider.calls[-1]  # type: ignore[attr-defined]
    assert [(m.role, m.name) for m in carol_last.messages[-2:]] == [
        ("user", "Alice"),
        ("user", "Bob"),
    ]
    assert carol_last.system.startswith(agents[2].persona.system_prompt)
    assert "You are Carol. You are talking with Alice and Bob." in carol_last.system


@pytest.mark.parametrize(
    ("scripts", "rules", "reason", "turns"),
    [
        (
            {"alice": ["Is it done?", "And now?"], "bob": ["Not yet.", "Verified: done."]},
            ExitRules(verifier=AgentId("bob")),
            StopReason.CONVERGED,
            4,
        ),
        (
            {"alice": ["hello", "Thanks. Goodbye!"], "bob": ["hi there"]},
            ExitRules(),
            StopReason.GOODBYE,
            3,
        ),
        (
            {"alice": ["tabs", "tabs"], "bob": ["spaces", "spaces"]},
            ExitRules(),
            StopReason.NO_IMPROVEMENT,
            3,
        ),
        (
            {"alice": ["we use tabs"], "bob": ["we use tabs"]},
            ExitRules(convergence_threshold=0.95, no_improvement=False),
            StopReason.CONVERGED,
            2,
        ),
    ],
    ids=["verified", "goodbye", "no-improvement", "score-threshold"],
)
async def test_each_exit_rule_stops_a_running_room(
    scripts: dict[str, list[str]], rules: ExitRules, reason: StopReason, turns: int
) -> None:
    room = make_room(rules=rules)
    log, recorder = journal(room)
    await run(RoomRunner(log, scripted_speaker(scripts)))
    assert log.state.stop_reason is reason
    assert log.state.current_turn == turns
    assert recorder.types()[-1] == "STOPPED"


async def test_a_reply_for_another_turn_is_dropped_and_the_turn_asked_again() -> None:
    room = make_room(limits=Limits(max_turns=4, retry_delay=0))
    asked: list[int] = []

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        asked.append(request.turn)
        if request.turn == 3 and asked.count(3) == 1:
            # a duplicate of turn 2's reply arriving late, then one from another room
            return TurnReply(room_id=request.room_id, turn=2, text="late duplicate")
        if request.turn == 3 and asked.count(3) == 2:
            return TurnReply(room_id=RoomId("elsewhere"), turn=3, text="wrong room")
        return TurnReply(room_id=request.room_id, turn=request.turn, text=f"turn {request.turn}")

    log, recorder = journal(room)
    await run(RoomRunner(log, speak))
    assert [m.text for m in recorder.messages()] == ["turn 1", "turn 2", "turn 3", "turn 4"]
    errors = [e for e in recorder.events if isinstance(e, ErrorEvent)]
    assert [e.message for e in errors] == [
        "dropped a reply for turn 2 of room 'r1': expected turn 3 of 'r1'",
        "dropped a reply for turn 3 of room 'elsewhere': expected turn 3 of 'r1'",
    ]
    assert asked == [1, 2, 3, 3, 3, 4]


async def test_a_provider_that_keeps_failing_stops_the_room_with_error() -> None:
    room = make_room(rules=ExitRules(max_failures=3))
    attempts = 0

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        nonlocal attempts
        attempts += 1
        if request.turn == 1:
            return TurnReply(room_id=request.room_id, turn=1, text="opening")
        raise CallTimeout("no response within 0.1 s", agent=agent_id, method="room/turn")

    log, recorder = journal(room)
    await run(RoomRunner(log, speak))
    assert log.state.stop_reason is StopReason.ERROR
    assert log.state.detail.startswith("turn 2 failed 3 times in a row: CallTimeout: no response")
    errors = [e for e in recorder.events if isinstance(e, ErrorEvent)]
    assert [(e.turn, e.attempt, e.code, e.agent_id) for e in errors] == [
        (2, 1, -32001, "bob"),
        (2, 2, -32001, "bob"),
        (2, 3, -32001, "bob"),
    ]
    assert attempts == 4


async def test_a_turn_past_its_deadline_fails_and_a_retry_succeeds() -> None:
    room = make_room(limits=Limits(max_turns=2, turn_timeout=0.05, retry_delay=0))
    hung = False

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        nonlocal hung
        if request.turn == 2 and not hung:
            hung = True
            await anyio.sleep_forever()
        return TurnReply(room_id=request.room_id, turn=request.turn, text=f"t{request.turn}")

    log, recorder = journal(room)
    await run(RoomRunner(log, speak))
    assert recorder.types() == ["MESSAGE", "ERROR", "MESSAGE", "STOPPED"]
    timed_out = recorder.events[1]
    assert isinstance(timed_out, ErrorEvent) and timed_out.message == "no reply within 0.05 s"
    assert log.state.stop_reason is StopReason.MAX_TURNS


async def test_dropped_and_empty_replies_count_as_failures() -> None:
    room = make_room(rules=ExitRules(max_failures=2))

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        if agent_id == "alice":
            return TurnReply(
                room_id=request.room_id, turn=request.turn, status="dropped", reason="stale"
            )
        return TurnReply(room_id=request.room_id, turn=request.turn, text="  ")

    log, recorder = journal(room)
    await run(RoomRunner(log, speak))
    messages = [e.message for e in recorder.events if isinstance(e, ErrorEvent)]
    assert messages == ["the agent dropped the turn: stale"] * 2
    assert log.state.stop_reason is StopReason.ERROR


async def test_a_member_offline_at_the_start_is_lost_after_the_grace_period() -> None:
    room = make_room(rules=ExitRules(agent_grace=0))
    log, recorder = journal(room)
    runner = RoomRunner(log, scripted_speaker({}), presence=lambda agent: agent != "bob")
    await run(runner)
    assert recorder.types() == ["AGENT_LEFT", "STOPPED"]
    assert recorder.events[0].agent_id == "bob"
    assert log.state.stop_reason is StopReason.AGENT_LOST
    assert log.state.detail == "Bob stayed offline for 0 s"


async def test_a_member_that_leaves_mid_turn_is_waited_for_and_welcomed_back() -> None:
    room = make_room(limits=Limits(max_turns=3, retry_delay=0), rules=ExitRules(agent_grace=60))
    online = {"alice": True, "bob": True}

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        if request.turn == 2 and not hasattr(speak, "failed"):
            speak.failed = True  # type: ignore[attr-defined]
            online["bob"] = False
            raise AgentUnavailable("agent 'bob' is offline", agent="bob")
        return TurnReply(room_id=request.room_id, turn=request.turn, text=f"t{request.turn}")

    log, recorder = journal(room)
    runner = RoomRunner(log, speak, presence=lambda agent: online[agent])
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        await recorder.wait_for(lambda e: type(e).__name__ == "AgentLeftEvent")
        online["bob"] = True
        runner.notice_presence("bob", True)
        with anyio.fail_after(GUARD):
            await runner.done.wait()
    # the failure while bob was away is not counted as an error: the room waited
    assert recorder.types() == [
        "MESSAGE",
        "AGENT_LEFT",
        "AGENT_JOINED",
        "MESSAGE",
        "MESSAGE",
        "STOPPED",
    ]
    assert log.state.stop_reason is StopReason.MAX_TURNS


async def test_a_presence_change_that_cannot_be_recorded_stops_the_room_not_its_teller() -> None:
    room = make_room(rules=ExitRules(agent_grace=60))
    state = RoomState(room=room)

    async def record(event: RoomEvent) -> None:
        raise RoomLeaseLost("another daemon runs the room now", room=room.id)

    asked = anyio.Event()

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    runner = RoomRunner(Journal(state, record, lambda _: None), speak)
    with anyio.fail_after(GUARD):
        async with anyio.create_task_group() as tg:

            async def run_room() -> None:
                with pytest.raises(RoomLeaseLost):
                    await runner.run()

            tg.start_soon(run_room)
            await asked.wait()
            runner.notice_presence("bob", False)  # returns at once; the room's task records
            await runner.done.wait()
    assert state.last_seq == 0


async def test_pause_abandons_the_turn_in_flight_and_records_paused() -> None:
    room = make_room()
    asked = anyio.Event()

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        if request.turn == 3:
            asked.set()
            await anyio.sleep_forever()
        return TurnReply(room_id=request.room_id, turn=request.turn, text=f"t{request.turn}")

    log, recorder = journal(room)
    runner = RoomRunner(log, speak)
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        with anyio.fail_after(GUARD):
            await asked.wait()
        runner.request_stop(StopReason.PAUSED)
    assert recorder.types() == ["MESSAGE", "MESSAGE", "STOPPED"]
    assert log.state.status is RoomStatus.PAUSED and log.state.stop_reason is StopReason.PAUSED
    assert log.state.detail == "paused on request" and log.state.current_turn == 2


async def test_stop_requested_before_the_runner_starts() -> None:
    log, recorder = journal(make_room())
    runner = RoomRunner(log, scripted_speaker({}))
    runner.request_stop(StopReason.STOPPED, "operator said so")
    await run(runner)
    assert recorder.types() == ["STOPPED"]
    assert log.state.stop_reason is StopReason.STOPPED and log.state.detail == "operator said so"


async def test_cancelling_the_runner_from_outside_records_nothing() -> None:
    log, recorder = journal(make_room())
    asked = anyio.Event()

    async def speak(agent_id: str, request: TurnRequest) -> TurnReply:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async with anyio.create_task_group() as tg:
        tg.start_soon(RoomRunner(log, speak).run)
        with anyio.fail_after(GUARD):
            await asked.wait()
        tg.cancel_scope.cancel()
    assert recorder.events == []
    assert log.state.status is RoomStatus.RUNNING
