"""A turn's budgets and prompt, as pure functions: where a cut reply ends, what a member is
shown within its context budget (and the summary of the rest), the turn prompt naming the
last speaker, the loop guard, and the run's seed."""

from __future__ import annotations

import msgspec

from mesh.rooms import ExitRules, Limits, Member, StopReason, build_turn_request
from mesh.rooms._budget import (
    CUT_MARK,
    end_of_reply,
    estimate_tokens,
    first_sentence,
    fit_context,
    summary_of,
)
from mesh.rooms._perspective import perspective_messages, system_prompt, turn_prompt
from mesh.rooms._policy import TurnPlan, next_turn
from mesh.rooms._rules import after_message, convergence_score
from registry import AgentId

from ._helpers import make_room, said

LONG = (
    "Tomatoes need six hours of sun. A south-facing balcony gives that, "
    "and a deep pot keeps the roots cool, but the wind"
)


def test_a_cut_reply_ends_at_its_last_full_sentence() -> None:
    assert end_of_reply("Pots are cheap. Seeds are cheaper. Soil is the cost", cut=True) == (
        "Pots are cheap. Seeds are cheaper."
    )
    assert end_of_reply('He said "grow herbs!" Then he', cut=True) == 'He said "grow herbs!"'
    # Not cut: left as the model wrote it, even without a full stop.
    assert end_of_reply("  Mint grows anywhere  ", cut=False) == "Mint grows anywhere"


def test_a_cut_reply_with_no_sentence_to_end_on_says_it_was_cut() -> None:
    # The only full stop would keep less than half: the reply says it was cut instead.
    assert end_of_reply(LONG, cut=True) == LONG.rsplit(" ", 1)[0].rstrip(",") + CUT_MARK
    assert end_of_reply("Growing herbs at home saves money because the", cut=True) == (
        f"Growing herbs at home saves money because{CUT_MARK}"
    )
    assert end_of_reply("Version 3.5 of the", cut=True) == f"Version 3.5 of{CUT_MARK}"


def test_the_first_sentence_is_bounded() -> None:
    assert first_sentence("Yes. And more.") == "Yes."
    assert first_sentence(" ".join(["word"] * 40), 5) == f"word word word word word{CUT_MARK}"


ROOM = make_room("ada", "ben", limits=Limits(context_tokens=40, retry_delay=0))
HISTORY = said(
    ROOM, *(f"Message {n} says something about balconies and pots." for n in range(1, 9))
)


def test_a_context_budget_shows_the_newest_messages_that_fit_and_sums_up_the_rest() -> None:
    dropped, shown = fit_context(ROOM, HISTORY, ROOM.member("ada"))
    size = sum(estimate_tokens(m.name) + estimate_tokens(m.text) for m in shown)
    assert size <= 40 and len(shown) >= 2 and shown[-1] == HISTORY[-1]
    assert [*dropped, *shown] == HISTORY
    messages = perspective_messages(ROOM, HISTORY, "ada")
    assert len(messages) == 1 + len(shown)
    opening = messages[0].content
    assert opening.startswith("Discussion topic: tabs or spaces")
    assert f"Earlier ({len(dropped)} earlier messages, no longer shown): " in opening
    last_ada, last_ben = dropped[-2:] if dropped[-1].agent_id == "ben" else dropped[-2:][::-1]
    assert f'Ada said "{last_ada.text}"' in opening and f'Ben said "{last_ben.text}"' in opening


def test_the_prompt_stops_growing_with_a_budget_and_grows_without_one() -> None:
    free = make_room("ada", "ben")
    long_history = said(ROOM, *(f"Point {n}: " + "pots and sun " * 10 for n in range(1, 31)))

    def size(room: object, upto: int) -> int:
        messages = perspective_messages(room, long_history[:upto], "ada")  # type: ignore[arg-type]
        return sum(estimate_tokens(m.content) for m in messages)

    budgeted = [size(ROOM, n) for n in (10, 20, 30)]
    unbounded = [size(free, n) for n in (10, 20, 30)]
    assert max(budgeted) - min(budgeted) < 20  # the summary line varies a little
    assert unbounded[0] < unbounded[1] < unbounded[2]


def test_a_members_own_budget_wins_and_the_newest_message_is_always_shown() -> None:
    room = make_room("ada", "ben", limits=Limits(context_tokens=10_000, retry_delay=0))
    tight = msgspec.structs.replace(room.member("ada"), context_tokens=1)
    dropped, shown = fit_context(room, HISTORY, tight)
    assert shown == HISTORY[-1:] and len(dropped) == 7
    assert fit_context(room, HISTORY, room.member("ben")) == ([], HISTORY)
    assert summary_of([]) == ""


def test_the_turn_prompt_names_the_last_speaker_and_quotes_them() -> None:
    room = make_room("ada", "ben", limits=Limits(reply_tokens=60, retry_delay=0))
    history = said(room, "Balconies get too much wind for tomatoes. Herbs are tougher.")
    prompt = turn_prompt(room, history, room.member("ben"))
    assert prompt.startswith(
        'Ada spoke last and said: "Balconies get too much wind for tomatoes." Answer Ada directly'
    )
    assert prompt.endswith(
        'Stay on the topic, "tabs or spaces". '
        "Reply in at most 36 words, ending with a full sentence."
    )
    first = turn_prompt(room, [], room.member("ada"))
    assert first.startswith('You speak first: give your own view on "tabs or spaces"')
    plan = next_turn(room, history)
    assert plan is not None
    assert system_prompt(room, plan.speaker, plan, history).endswith(prompt)


def test_the_opener_is_not_told_how_the_room_ends_the_others_are() -> None:
    # A small model told at turn 1 how a conversation ends opened by saying it had ended.
    room = make_room("ada", "ben")
    opener = next_turn(room, [])
    assert opener is not None
    assert "Goodbye" not in system_prompt(room, opener.speaker, opener, [])
    history = said(room, "Herbs first.")
    answer = next_turn(room, history)
    assert answer is not None
    assert 'with the word "Goodbye"' in system_prompt(room, answer.speaker, answer, history)


def test_the_turn_request_carries_the_reply_budget_and_the_turns_seed() -> None:
    room = msgspec.structs.replace(
        make_room("ada", "ben", limits=Limits(reply_tokens=50, retry_delay=0)), seed=1000
    )
    own = msgspec.structs.replace(room.member("ben"), reply_tokens=20)
    request = build_turn_request(room, HISTORY[:2], TurnPlan(turn=3, speaker=room.member("ada")))
    assert (request.max_tokens, request.seed) == (50, 1003)
    members = (room.member("ada"), own)
    mine = build_turn_request(
        msgspec.structs.replace(room, members=members), [], TurnPlan(turn=1, speaker=own)
    )
    assert (mine.max_tokens, mine.seed) == (20, 1001)
    unseeded = build_turn_request(
        make_room(), [], TurnPlan(turn=1, speaker=Member(id=AgentId("alice")))
    )
    assert (unseeded.max_tokens, unseeded.seed) == (None, None)


GUARDED = make_room("ada", "ben", rules=ExitRules(repetition_threshold=0.8))


def test_the_loop_guard_ends_a_room_whose_member_says_nearly_the_same_again() -> None:
    history = said(
        GUARDED,
        "Herbs are the easiest start for a balcony garden.",
        "Costs matter: pots, soil and water add up quickly.",
        "Herbs are the easiest start for any balcony garden.",
    )
    verdict = after_message(GUARDED, history)
    assert verdict is not None and verdict.reason is StopReason.NO_IMPROVEMENT
    assert verdict.detail.startswith("turn 3 (Ada) is 0.") and "to their turn 1" in verdict.detail
    assert after_message(make_room("ada", "ben"), history) is None  # the guard is off


def test_the_loop_guard_ends_a_room_whose_score_stays_high() -> None:
    texts = [
        "Growing food at home is good for you and the planet.",
        "Growing food at home is good for the planet and you.",
        "Growing food at home is good for you and for the planet.",
    ]
    history = said(GUARDED, *texts)
    scored = [
        msgspec.structs.replace(m, score=convergence_score(history[: i + 1]))
        for i, m in enumerate(history)
    ]
    assert scored[1].score >= 0.8 and scored[2].score >= 0.8
    verdict = after_message(GUARDED, scored[:2])
    assert verdict is None  # one high score is agreement, not yet a loop
    verdict = after_message(GUARDED, scored)
    assert verdict is not None and verdict.reason is StopReason.NO_IMPROVEMENT


def test_a_conversation_that_moves_on_is_not_a_loop() -> None:
    texts = [
        "Herbs are the easiest start: basil, mint and chives.",
        "What do the pots and the soil cost, though?",
        "About twenty euros for three pots, and the soil lasts a year.",
        "Then the water bill matters more than the pots.",
    ]
    history = said(GUARDED, *texts)
    scored = [
        msgspec.structs.replace(m, score=convergence_score(history[: i + 1]))
        for i, m in enumerate(history)
    ]
    assert all(after_message(GUARDED, scored[: n + 1]) is None for n in range(len(scored)))
