"""Perspectives: the same history as A, B and C see it; awareness levels."""

from __future__ import annotations

from mesh.providers import ChatMessage
from mesh.rooms import ExitRules, Limits, build_turn_request, perspective_messages, system_prompt
from mesh.rooms._perspective import opening
from mesh.rooms._policy import TurnPlan, next_turn
from registry import AgentId

from ._helpers import make_room, said

ROOM3 = make_room("alice", "bob", "carol")
HISTORY = said(ROOM3, "Hello, I'm Alice", "Hi Alice, I'm Bob", "And I'm Carol", "Nice to meet you")


def test_the_same_history_as_seen_by_alice_bob_and_carol() -> None:
    start = opening(ROOM3)
    assert start == ChatMessage(
        role="user",
        content="Discussion topic: tabs or spaces\n\nPlease share your initial thoughts.",
    )
    assert perspective_messages(ROOM3, HISTORY, "alice") == (
        start,
        ChatMessage(role="assistant", content="Hello, I'm Alice"),
        ChatMessage(role="user", content="Hi Alice, I'm Bob", name="Bob"),
        ChatMessage(role="user", content="And I'm Carol", name="Carol"),
        ChatMessage(role="assistant", content="Nice to meet you"),
    )
    assert perspective_messages(ROOM3, HISTORY, "bob") == (
        start,
        ChatMessage(role="user", content="Hello, I'm Alice", name="Alice"),
        ChatMessage(role="assistant", content="Hi Alice, I'm Bob"),
        ChatMessage(role="user", content="And I'm Carol", name="Carol"),
        ChatMessage(role="user", content="Nice to meet you", name="Alice"),
    )
    assert perspective_messages(ROOM3, HISTORY, "carol") == (
        start,
        ChatMessage(role="user", content="Hello, I'm Alice", name="Alice"),
        ChatMessage(role="user", content="Hi Alice, I'm Bob", name="Bob"),
        ChatMessage(role="assistant", content="And I'm Carol"),
        ChatMessage(role="user", content="Nice to meet you", name="Alice"),
    )


def test_each_system_prompt_names_the_member_the_others_and_the_topic() -> None:
    for me, others in [
        ("Alice", "Bob and Carol"),
        ("Bob", "Alice and Carol"),
        ("Carol", "Alice and Bob"),
    ]:
        prompt = system_prompt(ROOM3, ROOM3.member(me.lower()))
        assert prompt.startswith(f"You are {me}. You are talking with {others}.")
        assert "The topic: tabs or spaces" in prompt
        assert 'finish your message with the word "Goodbye"' in prompt


def test_awareness_levels_say_more_and_more() -> None:
    def prompt(level: str) -> str:
        room = make_room("alice", "bob", "carol", awareness=level)
        plan = TurnPlan(turn=5, speaker=room.member("bob"))
        return system_prompt(room, room.member("bob"), plan)

    basic, intermediate, high = prompt("basic"), prompt("intermediate"), prompt("high")
    assert "AI" not in basic and "participant" not in basic
    assert "You are Bob, the participant. You are talking with other AI agents: " in intermediate
    assert "Alice (participant) and Carol (participant)" in intermediate
    assert "room r1 of agent-mesh" not in intermediate
    assert "room r1 of agent-mesh" in high
    assert "Alice, Bob and Carol speak in turn, round-robin. This is turn 5 of at most 40." in high
    assert "Everything said is recorded." in high
    assert 'when someone says "Goodbye"' in high


def test_the_room_level_wins_over_the_persona_level() -> None:
    room = make_room("alice", "bob")
    shy = room.members[0].__class__(id=room.members[0].id, name="Alice", role="x", awareness="high")
    assert "agent-mesh" in system_prompt(room, shy)
    strict = make_room("alice", "bob", awareness="basic")
    assert "agent-mesh" not in system_prompt(strict, shy)


def test_the_verifier_is_told_how_to_converge() -> None:
    room = make_room("alice", "bob", rules=ExitRules(verifier=AgentId("bob"), goodbye=None))
    assert 'start your message with "Verified"' in system_prompt(room, room.member("bob"))
    assert "Verified" not in system_prompt(room, room.member("alice"))
    assert "Goodbye" not in system_prompt(room, room.member("alice"))


def test_a_review_turn_says_which_step_it_is() -> None:
    room = make_room("ada", "ben", mode="review", topic="add a flag")
    prompts = []
    transcript = said(room)
    for _ in range(4):
        plan = next_turn(room, transcript)
        assert plan is not None
        request = build_turn_request(room, transcript, plan)
        prompts.append((plan.speaker.id, request.step, request.system))
        transcript = said(room, *["..."] * plan.turn)
    assert [(who, step) for who, step, _ in prompts] == [
        ("ada", "propose"),
        ("ben", "implement"),
        ("ada", "critique"),
        ("ada", "verify"),
    ]
    assert "Reply with a unified diff only." in prompts[1][2]
    assert 'begin your reply with "Verified"' in prompts[3][2]
    assert opening(room).content == "Task: add a flag"


def test_a_turn_request_carries_room_turn_deadline_and_window() -> None:
    room = make_room("alice", "bob", limits=Limits(turn_timeout=7, context_messages=2))
    transcript = said(room, "one", "two", "three")
    plan = next_turn(room, transcript)
    assert plan is not None
    request = build_turn_request(room, transcript, plan)
    assert (request.room_id, request.turn, request.agent_id, request.timeout) == ("r1", 4, "bob", 7)
    assert [m.content for m in request.messages][1:] == ["two", "three"]
