"""A running room's turn budgets with scripted personas (words stand in for tokens): replies
cut by the room's budget end at a sentence, the context budget keeps each prompt bounded,
each turn names the last speaker, the loop guard stops a room going round, the seed of the run
reaches every turn; on both backends."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mesh.agents.persona import PersonaAgent
from mesh.providers import ProviderConfig, ScriptedCall, ScriptedProvider
from mesh.rooms import ExitRules, Limits, RoomManager, RoomSpec, StopReason, role_persona
from mesh.rooms._budget import CUT_MARK
from mesh.rooms._engine import RoomRunner

from ._helpers import GUARD, direct_describer, direct_speaker, journal, make_room, persona_agent

pytestmark = pytest.mark.anyio


def calls(agent: PersonaAgent) -> list[ScriptedCall]:
    provider = agent.provider
    assert isinstance(provider, ScriptedProvider)
    return provider.calls


async def test_replies_cut_by_the_rooms_budget_end_at_a_sentence_or_say_so() -> None:
    room = make_room("ada", "ben", limits=Limits(max_turns=2, reply_tokens=8, retry_delay=0))
    ada = persona_agent("ada", "Pots are cheap. Seeds are cheaper still. Soil is where it costs")
    ben = persona_agent("ben", "I keep counting what the water and the pots and the soil cost")
    log, recorder = journal(room)
    with anyio.fail_after(GUARD):
        await RoomRunner(log, direct_speaker([ada, ben])).run()
    texts = [m.text for m in recorder.messages()]
    assert texts == [
        "Pots are cheap. Seeds are cheaper still.",
        f"I keep counting what the water and{CUT_MARK}",
    ]
    assert [c.max_tokens for c in calls(ada) + calls(ben)] == [8, 8]


async def test_the_personas_own_smaller_budget_wins_and_no_budget_leaves_replies_whole() -> None:
    room = make_room("ada", "ben", limits=Limits(max_turns=2, reply_tokens=50, retry_delay=0))
    config = ProviderConfig(
        provider="scripted", script=("One two three. Four five six seven eight.",), max_tokens=4
    )
    ada = PersonaAgent("ada", role_persona("participant", config), name="Ada")
    ben = persona_agent("ben", "Nine ten eleven twelve thirteen fourteen")
    log, recorder = journal(room)
    with anyio.fail_after(GUARD):
        await RoomRunner(log, direct_speaker([ada, ben])).run()
    assert [m.text for m in recorder.messages()] == [
        "One two three.",
        "Nine ten eleven twelve thirteen fourteen",
    ]
    assert calls(ada)[0].max_tokens == 4


async def test_a_context_budget_keeps_every_prompt_bounded_with_a_summary() -> None:
    script = [f"Point {n}: balconies, pots, sun and water, again and again." for n in range(20)]
    other = [f"Question {n}: and what does it cost, in money and in time?" for n in range(20)]
    limits = Limits(max_turns=16, context_tokens=60, retry_delay=0)
    # The scripted provider picks its line by the replies it is shown: with a budget it
    # says the same line again, which is not what this test is about.
    rules = ExitRules(goodbye=None, no_improvement=False)
    room = make_room("ada", "ben", limits=limits, rules=rules)
    ada, ben = persona_agent("ada", *script), persona_agent("ben", *other)
    log, recorder = journal(room)
    with anyio.fail_after(GUARD):
        await RoomRunner(log, direct_speaker([ada, ben])).run()
    assert len(recorder.messages()) == 16
    heard = [c.messages for c in calls(ada) + calls(ben)]
    sizes = [sum(len(m.content) for m in messages[1:]) for messages in heard]
    assert max(sizes) <= 60 * 4 + 80  # the budget, and the newest message whatever its size
    late = heard[-1]
    assert "earlier messages, no longer shown" in late[0].content
    # Without a budget the last prompt holds every message.
    free = make_room("ada", "ben", limits=Limits(max_turns=16, retry_delay=0), rules=rules)
    ada2, ben2 = persona_agent("ada", *script), persona_agent("ben", *other)
    log2, _ = journal(free)
    with anyio.fail_after(GUARD):
        await RoomRunner(log2, direct_speaker([ada2, ben2])).run()
    assert len(calls(ben2)[-1].messages) == 16 and len(late) < 10


async def test_each_turn_names_the_last_speaker_and_what_they_said() -> None:
    room = make_room("ada", "ben", limits=Limits(max_turns=3, retry_delay=0))
    ada = persona_agent("ada", "Herbs first. They forgive mistakes.", "Then tomatoes in June.")
    ben = persona_agent("ben", "Herbs cost little, fair. What about the water?")
    log, _ = journal(room)
    with anyio.fail_after(GUARD):
        await RoomRunner(log, direct_speaker([ada, ben])).run()
    systems = [c.system or "" for c in calls(ada) + calls(ben)]
    assert 'You speak first: give your own view on "tabs or spaces"' in systems[0]
    assert 'Ben spoke last and said: "Herbs cost little, fair." Answer Ben directly' in systems[1]
    assert 'Ada spoke last and said: "Herbs first." Answer Ada directly' in systems[2]


ADA_LOOP = (
    "Herbs are the easiest start for a small balcony garden.",
    "Herbs are the easiest start for any small balcony garden.",
)


async def test_the_loop_guard_stops_a_room_going_round_with_no_improvement() -> None:
    ada = persona_agent("ada", *ADA_LOOP)
    ben = persona_agent("ben", "Costs add up: pots, soil, water.", "Light matters more than cost.")
    ada_again = persona_agent("ada", *ADA_LOOP)
    guarded = make_room(
        "ada",
        "ben",
        limits=Limits(max_turns=12, retry_delay=0),
        rules=ExitRules(repetition_threshold=0.8),
    )
    log, recorder = journal(guarded)
    runner = RoomRunner(log, direct_speaker([ada, ben]))
    with anyio.fail_after(GUARD):
        await runner.run()
    assert runner.verdict is not None and runner.verdict.reason is StopReason.NO_IMPROVEMENT
    assert len(recorder.messages()) == 3 and "(Ada) is 0.89 alike" in runner.verdict.detail
    # The same scripts without the guard talk to the turn limit.
    free = make_room("ada", "ben", limits=Limits(max_turns=12, retry_delay=0))
    log2, _ = journal(free)
    runner2 = RoomRunner(log2, direct_speaker([ada_again, ben]))
    with anyio.fail_after(GUARD):
        await runner2.run()
    assert runner2.verdict is not None and runner2.verdict.reason is StopReason.MAX_TURNS


async def test_the_seed_of_the_run_is_recorded_and_reaches_each_turn(tmp_path: Path) -> None:
    ada = persona_agent("ada", "Herbs first.", "Then tomatoes.")
    ben = persona_agent("ben", "What does it cost?", "And the water?")
    spec = RoomSpec(
        topic="balconies", members=("ada", "ben"), limits=Limits(max_turns=4), seed=4242
    )
    async with RoomManager(
        tmp_path, speak=direct_speaker([ada, ben]), describe=direct_describer([ada, ben])
    ) as rooms:
        room = await rooms.create(spec)
        with anyio.fail_after(GUARD):
            async with rooms.subscribe_live(room.id) as events:
                async for _ in events:
                    pass
        snapshot = await rooms.get(room.id)
    assert snapshot.room.seed == 4242 and snapshot.stop_reason is StopReason.MAX_TURNS
    assert [c.seed for c in calls(ada)] == [4243, 4245]
    assert [c.seed for c in calls(ben)] == [4244, 4246]
    # Reopened from its store, the room still knows its seed (a resumed room replays it).
    async with RoomManager(tmp_path, speak=direct_speaker([ada, ben])) as again:
        assert (await again.get(room.id)).room.seed == 4242
