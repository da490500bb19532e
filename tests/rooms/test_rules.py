"""Exit rules, convergence score and turn policy: pure functions, each rule triggered."""

from __future__ import annotations

import msgspec
import pytest

from mesh.rooms import ExitRules, Limits, StopReason
from mesh.rooms._policy import next_turn, review_step
from mesh.rooms._rules import (
    after_message,
    before_turn,
    check_agent_lost,
    check_failures,
    convergence_score,
    is_verified,
    lost_deadline,
    says_goodbye,
    similarity,
)
from registry import AgentId

from ._helpers import make_room, said


def test_similarity_is_one_for_the_same_words_and_falls_with_difference() -> None:
    assert similarity("We agree on tabs.", "we AGREE on tabs") == 1.0
    assert similarity("", "") == 1.0
    assert similarity("something", "") == 0.0
    assert similarity("apples and pears", "quantum chromodynamics") == pytest.approx(
        0.4 * 2 / 3, abs=1e-4
    )
    close = similarity("we should use tabs everywhere", "we should use tabs mostly")
    far = similarity("we should use tabs everywhere", "spaces are the only sane choice here")
    assert 0 <= far < close < 1


def test_the_score_compares_every_members_latest_message() -> None:
    room = make_room("alice", "bob", "carol")
    assert convergence_score(said(room, "only one spoke")) == 0.0
    two = said(room, "tabs are best", "tabs are best")
    assert convergence_score(two) == 1.0
    three = said(room, "tabs are best", "tabs are best", "spaces win always")
    assert convergence_score(three) == pytest.approx(
        (1.0 + 2 * similarity("tabs are best", "spaces win always")) / 3, abs=1e-3
    )


def test_verified_prefix_converges_only_for_the_verifier() -> None:
    room = make_room(rules=ExitRules(verifier=AgentId("bob")))
    verdict = after_message(room, said(room, "Verified by me?", "**Verified**: all good"))
    assert verdict is not None and verdict.reason is StopReason.CONVERGED
    assert "Bob verified at turn 2" in verdict.detail
    assert after_message(room, said(room, "Verified: alice is not the verifier")) is None
    assert after_message(room, said(room, "x", "verified, lowercase")) is None
    assert is_verified("  \n> Verified.", "Verified")


def test_review_converges_on_verified_only_at_the_verify_step() -> None:
    room = make_room("ada", "ben", mode="review")
    critique = said(room, "plan", "diff", "Verified already?")  # turn 3 is the critique
    assert after_message(room, critique) is None
    verdict = after_message(
        room, said(room, "plan", "diff", "critique", "Verified: meets scope & checklist.")
    )
    assert verdict is not None and verdict.reason is StopReason.CONVERGED


@pytest.mark.parametrize(
    ("text", "bye"),
    [
        ("Goodbye!", True),
        ("Thanks, all. Goodbye.", True),
        ("Goodbye, Bob: it was a pleasure", True),
        ("GOODBYE", True),
        ("I won't say goodbye yet, there is more", False),
        ("goodbyes are hard", False),
        ("", False),
    ],
)
def test_goodbye_is_the_first_or_last_word(text: str, bye: bool) -> None:
    assert says_goodbye(text, "goodbye") is bye


def test_goodbye_stops_the_room_and_can_be_turned_off() -> None:
    room = make_room()
    verdict = after_message(room, said(room, "hello", "That settles it. Goodbye."))
    assert verdict is not None and verdict.reason is StopReason.GOODBYE
    assert verdict.detail == "Bob said goodbye at turn 2"
    assert (
        after_message(make_room(rules=ExitRules(goodbye=None)), said(room, "hi", "Goodbye")) is None
    )
    marker = make_room(rules=ExitRules(goodbye="over and out"))
    assert after_message(marker, said(marker, "Roger. Over and out!")) is not None


def test_repeating_yourself_or_the_last_speaker_is_no_improvement() -> None:
    room = make_room()
    own = after_message(room, said(room, "tabs", "spaces", "tabs"))
    assert own is not None and own.reason is StopReason.NO_IMPROVEMENT
    assert own.detail == "turn 3 (Alice) repeats turn 1"
    echo = after_message(room, said(room, "tabs  are\nfine", "tabs are fine"))
    assert echo is not None and echo.reason is StopReason.NO_IMPROVEMENT
    assert after_message(room, said(room, "tabs", "spaces", "tabs!")) is None
    off = make_room(rules=ExitRules(no_improvement=False))
    assert after_message(off, said(off, "tabs", "tabs")) is None


def test_review_no_improvement_compares_consecutive_diffs_only() -> None:
    room = make_room("ada", "ben", mode="review")
    # turns: 1 propose, 2 implement, 3 critique, 4 verify, 5 implement
    same = said(room, "plan", "diff A", "fix it", "not yet", "diff A")
    verdict = after_message(room, same)
    assert verdict is not None and verdict.reason is StopReason.NO_IMPROVEMENT
    assert after_message(room, said(room, "plan", "diff A", "fix it", "not yet", "diff B")) is None
    # the architect repeating a critique is not stagnation of the diff
    assert after_message(room, said(room, "plan", "diff A", "fix it", "fix it")) is None


def test_the_score_threshold_converges_when_set() -> None:
    room = make_room(rules=ExitRules(convergence_threshold=0.9, no_improvement=False))
    transcript = said(room, "we use tabs", "we use tabs")
    transcript[-1] = msgspec.structs.replace(transcript[-1], score=1.0)
    verdict = after_message(room, transcript)
    assert verdict is not None and verdict.reason is StopReason.CONVERGED
    assert "convergence score 1.00 reached 0.90" in verdict.detail
    assert after_message(make_room(rules=ExitRules(no_improvement=False)), transcript) is None


def test_max_turns_in_a_chat_counts_messages() -> None:
    room = make_room(limits=Limits(max_turns=3))
    assert after_message(room, said(room, "a", "b")) is None
    verdict = after_message(room, said(room, "a", "b", "c"))
    assert verdict is not None and verdict.reason is StopReason.MAX_TURNS
    assert before_turn(room, said(room, "a", "b", "c")) == verdict


def test_max_turns_in_a_review_counts_rounds() -> None:
    room = make_room("ada", "ben", mode="review", limits=Limits(max_turns=2))
    texts = ["plan", "d1", "c1", "v1", "d2", "c2", "v2"]
    assert after_message(room, said(room, *texts[:4])) is None  # round 1 verified nothing
    verdict = after_message(room, said(room, *texts))
    assert verdict is not None and verdict.reason is StopReason.MAX_TURNS
    assert verdict.detail == "2 review rounds without verification"


def test_a_member_offline_past_the_grace_period_is_lost() -> None:
    room = make_room(rules=ExitRules(agent_grace=30))
    assert check_agent_lost(room, {"bob": 100.0}, now=129.9) is None
    assert lost_deadline(room, {"bob": 100.0, "alice": 110.0}) == 130.0
    verdict = check_agent_lost(room, {"bob": 100.0}, now=130.0)
    assert verdict is not None and verdict.reason is StopReason.AGENT_LOST
    assert verdict.detail == "Bob stayed offline for 30 s"


def test_failing_turns_end_in_error_after_max_failures() -> None:
    room = make_room(rules=ExitRules(max_failures=3))
    assert check_failures(room, 2, turn=4, error="boom") is None
    verdict = check_failures(room, 3, turn=4, error="ProviderUnreachable: no route")
    assert verdict is not None and verdict.reason is StopReason.ERROR
    assert verdict.detail == "turn 4 failed 3 times in a row: ProviderUnreachable: no route"


def test_three_agents_take_turns_in_order() -> None:
    room = make_room("alice", "bob", "carol")
    transcript = said(room)
    order = []
    for _ in range(7):
        plan = next_turn(room, transcript)
        assert plan is not None
        order.append(plan.speaker.id)
        transcript = said(room, *["x"] * plan.turn)
    assert order == ["alice", "bob", "carol", "alice", "bob", "carol", "alice"]


def test_a_member_at_its_message_limit_stays_silent() -> None:
    room = make_room("alice", "bob", "carol", limits=Limits(max_messages_per_agent=1))
    transcript = said(room, "a")  # alice has used her message
    plan = next_turn(room, transcript)
    assert plan is not None and plan.speaker.id == "bob"
    # alice and bob have used theirs: carol answers bob, then no one may answer her
    transcript = said(room, "a", "b")
    plan = next_turn(room, transcript)
    assert plan is not None and plan.speaker.id == "carol"
    transcript = said(room, "a", "b", "c")
    assert next_turn(room, transcript) is None
    verdict = before_turn(room, transcript)
    assert verdict is not None and verdict.reason is StopReason.MAX_TURNS
    assert "limit of 1 messages" in verdict.detail


def test_two_members_and_the_default_limits_talk_for_every_turn() -> None:
    # 40 turns by default, 20 messages each: the 40th turn is the second member's 20th.
    room = make_room("alice", "bob")
    assert room.max_turns == 2 * room.limits.max_messages_per_agent
    for turn in range(1, room.max_turns + 1):
        transcript = said(room, *["x"] * (turn - 1))
        assert before_turn(room, transcript) is None, turn
        plan = next_turn(room, transcript)
        assert plan is not None and plan.turn == turn
    verdict = before_turn(room, said(room, *["x"] * room.max_turns))
    assert verdict is not None and verdict.detail == "reached the limit of 40 turns"


def test_the_limit_skips_a_silent_member_and_keeps_the_order() -> None:
    room = make_room("alice", "bob", "carol", limits=Limits(max_messages_per_agent=2))
    # a transcript from a room that was not always round-robin: alice spoke twice
    texts = said(room, "1", "2", "3")
    speakers = ["alice", "alice", "carol"]
    transcript = [
        msgspec.structs.replace(m, agent_id=who, name=who.capitalize())
        for m, who in zip(texts, speakers, strict=True)
    ]
    plan = next_turn(room, transcript)
    assert plan is not None and plan.speaker.id == "bob"  # after carol, skipping alice


def test_the_review_schedule() -> None:
    assert [review_step(t) for t in range(1, 9)] == [
        ("propose", 0, 1),
        ("implement", 1, 1),
        ("critique", 0, 1),
        ("verify", 0, 1),
        ("implement", 1, 2),
        ("critique", 0, 2),
        ("verify", 0, 2),
        ("implement", 1, 3),
    ]
    with pytest.raises(ValueError, match="count from 1"):
        review_step(0)
