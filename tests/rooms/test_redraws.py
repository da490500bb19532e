"""Redraws: a reply that recites its prompt, addresses itself, talks about its reply,
repeats a message, ignores the message it answers, narrates or speaks as an assistant is
asked for again (``Limits.redraws``), and the room keeps the first
draw without a fault, else the one with the fewest. The faulty replies below are ones the
demo's 135 M model really wrote. On both backends."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import msgspec
import pytest

from mesh.agents.persona import _Seat, admit
from mesh.rooms import (
    DeltaEvent,
    InvalidRoomSpec,
    Limits,
    Member,
    MessageEvent,
    RoomId,
    RoomManager,
    RoomSpec,
    TurnReply,
    TurnRequest,
    decode_room_spec,
)
from mesh.rooms._draws import reply_faults, unlabelled, weight
from mesh.rooms._engine import Journal, RoomRunner, report_delta
from mesh.rooms._perspective import build_turn_request
from mesh.rooms._policy import next_turn
from mesh.rooms._state import RoomState
from registry import AgentId

from ._helpers import GUARD, Recorder, clock, journal, make_room, persona_agent

TOPIC = "Is it worth growing your own vegetables on a small city balcony?"
POINT = "What about pests: pigeons, aphids and snails?"
GOOD = "Pigeons took the lettuce on my balcony twice, so I put a net over the pots."
INSTRUCTIONS = (
    "You are Ben. You are talking with Ada.\n\nThe topic: " + TOPIC + "\n\nReply with your "
    "next message only, in your own voice, building on what was said. When the conversation "
    'has reached its natural end, finish your message with the word "Goodbye".'
)


def faults(
    text: str,
    *,
    name: str = "Ben",
    messages: tuple[str, ...] = (GOOD,),
    answers: str | None = None,
) -> set[str]:
    found = reply_faults(
        text,
        name=name,
        instructions=INSTRUCTIONS,
        subject=(TOPIC, POINT),
        messages=messages,
        others=("Ada",),
        answers=answers,
    )
    return set(found)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "You are Ben. You're talking with Ada. The conversation: Is it worth growing your "
            "own vegetables on a small city balcony?",
            {"addresses itself", "recites its instructions"},
        ),
        (
            "Your answer should be: You can use a sentence.",
            {"talks about its reply", "strays from the subject"},
        ),
        ("Here's a possible response: the pots cost more.", {"talks about its reply"}),
        ("I think the answer is: not enough sun on a balcony.", {"talks about its reply"}),
        (
            "Here's the corrected message: snails eat the balcony lettuce.",
            {"talks about its reply"},
        ),
        ("The answer to your question is: the balcony is too small.", {"talks about its reply"}),
        ("Snails on the balcony? Answer Ada: no.", {"talks about its reply"}),
        ("I have no idea.", {"strays from the subject"}),
        ("Is it worth growing your own vegetables on a small balcony?", {"repeats the question"}),
        ("What about pests?", {"repeats the question"}),
        ("Pigeons and snails eat the balcony…", {"is cut off"}),
        ("Ben, you've got it. Well done!", {"addresses itself", "strays from the subject"}),
        # A word of the point, the topic or the message it answers is enough.
        ("A net keeps the birds off.", {"strays from the subject"}),
        ("A net keeps the pigeon off.", set()),
        ("Lettuce is cheap at the market.", set()),
        (
            "Reply with your next message only, in your own voice, building on what was said.",
            {"recites its instructions", "strays from the subject"},
        ),
        (
            "Pigeons took the lettuce on my balcony twice, so I put a net over the pots!",
            {"repeats a message"},
        ),
        # Restating the topic or the point is not reciting: it is what they talk about.
        ("Snails are worse than pigeons: they eat the basil at night.", set()),
        ("It is worth growing your own vegetables on a small city balcony, net or not.", set()),
        # Another's name after "you are" is talk, not a recital of one's own prompt.
        ("You are Ada, the one with the pigeons: a net costs money too.", set()),
        # Its own name, as the model wrote it when it lost track of who speaks.
        ("That's a good point, Ben: the net keeps the pigeons off.", {"addresses itself"}),
        # Telling of the one it talks to, or writing a script of lines, as the demo's model did.
        ("Ben smiled. Ada's pigeons ate the lettuce.", {"addresses itself", "narrates"}),
        ("Ada's point is that a net keeps the pigeons off.", {"narrates"}),
        ("He is the one who pays for the nets on the balcony.", {"narrates"}),
        ("Abra: Yes, the pigeons ate the lettuce.", {"narrates"}),
        ("The net is fine. Derek: So the pigeons stay off?", {"narrates"}),
        # A member speaks to the others, not to a user it serves.
        ("No worries, I'm happy to help with the pigeons.", {"speaks as an assistant"}),
        ("You're an AI assistant for text re-writing: the balcony.", {"speaks as an assistant"}),
        ("I'm sorry, but I can't talk about pigeons.", {"speaks as an assistant"}),
        # Ada, by name, at the start: spoken to her, not of her.
        ("Ada, the net costs four euros and the pigeons stay off.", set()),
    ],
)
def test_each_fault_is_found_and_a_good_reply_has_none(text: str, expected: set[str]) -> None:
    assert faults(text) == expected


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Ben: The nets cost money.", "The nets cost money."),
        ("**ben** :  The nets cost money.", "The nets cost money."),
        ("Ada: you forgot the nets.", "you forgot the nets."),  # the one it answers
        ("Carl: you forgot the nets.", "Carl: you forgot the nets."),  # not in the room
        ("Ben:", "Ben:"),  # nothing after the label: left as it is
        ("Bend the stems: they grow back.", "Bend the stems: they grow back."),
    ],
)
def test_a_label_of_a_members_name_is_taken_off(text: str, kept: str) -> None:
    assert unlabelled(text, ["Ada", "Ben"]) == kept


ASKED = "Pigeons ate my neighbour's lettuce in a week. Who pays for the nets?"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # On the subject, but nothing of what Ada added: it would fit after any message.
        ("Pests on a balcony are part of gardening in a city.", {"ignores the message it answers"}),
        ("The nets are cheap, and they last for years.", set()),
        ("My neighbour pays for his own; pigeons are his problem.", set()),
        # Off the subject altogether is the stronger fault, said once.
        ("I have no idea.", {"strays from the subject"}),
    ],
)
def test_a_reply_that_takes_up_nothing_of_the_message_it_answers_is_found(
    text: str, expected: set[str]
) -> None:
    assert faults(text, name="Ben", messages=(ASKED,), answers=ASKED) == expected


def test_a_format_word_the_conversation_itself_used_is_not_a_fault() -> None:
    said = ("Can you say in one sentence what the net cost?",)
    assert faults("In one sentence: the net cost four euros.", messages=said) == set()


def test_admit_answers_a_later_draw_afresh_and_an_earlier_one_from_the_seat() -> None:
    answered = _Seat(
        turn=3, draw=0, reply=TurnReply(room_id=RoomId("r"), turn=3, text="x"), busy=False
    )
    assert admit(answered, 3, 1) == "speak"
    assert admit(answered, 3, 0) == "replay"
    assert admit(_Seat(turn=3, draw=0, busy=True), 3, 1) == "busy"
    redrawn = _Seat(
        turn=3, draw=2, reply=TurnReply(room_id=RoomId("r"), turn=3, text="y"), busy=False
    )
    # A room restarted mid-turn asks draw 0 again: it gets the last draw, not a new one.
    assert admit(redrawn, 3, 0) == "replay"
    assert admit(redrawn, 2, 5) == "stale"


class Live(Recorder):
    """A recorder that also keeps what is only shown live (the ``DELTA`` events)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: list[DeltaEvent] = []

    def show(self, event: object) -> None:
        assert isinstance(event, DeltaEvent)
        self.live.append(event)


class Draws:
    """Answers each member from its own list, one line a request (a draw is a request)."""

    def __init__(self, **scripts: tuple[str, ...]) -> None:
        self._left = {agent: list(lines) for agent, lines in scripts.items()}
        self.requests: list[TurnRequest] = []

    async def __call__(self, agent_id: str, request: TurnRequest) -> TurnReply:
        await anyio.lowlevel.checkpoint()
        self.requests.append(request)
        return TurnReply(
            room_id=request.room_id, turn=request.turn, text=self._left[agent_id].pop(0)
        )


async def run_room(redraws: int, speak: Draws) -> Live:
    room = make_room(
        "ada", "ben", topic=TOPIC, limits=Limits(max_turns=2, retry_delay=0, redraws=redraws)
    )
    room = msgspec.structs.replace(room, seed=40)
    live = Live()
    log = Journal(
        RoomState(room=room), live.record, live.publish, clock=clock(), publish_live=live.show
    )
    with anyio.fail_after(GUARD):
        await RoomRunner(log, speak).run()
    return live


SELF = "You are Ada. You are talking with Ben. The topic: " + TOPIC
ABOUT = "Your answer should be one sentence about the pots."
NETS = "Nets cost money, and who waters the pots in August?"


@pytest.mark.anyio
async def test_a_faulty_reply_is_drawn_again_and_the_good_draw_is_kept() -> None:
    speak = Draws(ada=(SELF, GOOD), ben=("Ben: " + NETS,))
    live = await run_room(2, speak)
    assert [m.text for m in live.messages()] == [GOOD, NETS]  # Ben's own label taken off
    opened = [(d.agent_id, d.turn, d.redraw) for d in live.live if d.text == ""]
    assert opened == [
        ("ada", 1, ""),
        ("ada", 1, "addresses itself; recites its instructions"),
        ("ben", 2, ""),
    ]
    # The draw is the same turn, marked as a new draw, with a seed of its own.
    first, again, _ = speak.requests
    assert (first.turn, first.draw, again.turn, again.draw) == (1, 0, 1, 1)
    assert first.seed is not None and again.seed is not None and first.seed != again.seed
    assert again.messages == first.messages and again.system == first.system


@pytest.mark.anyio
async def test_when_every_draw_has_a_fault_the_one_with_the_fewest_is_kept() -> None:
    worst = "You are Ada. Your answer should be one sentence."  # two faults
    speak = Draws(ada=(worst, ABOUT, worst), ben=(NETS,))
    live = await run_room(2, speak)
    assert live.messages()[0].text == ABOUT
    assert [r.draw for r in speak.requests if r.agent_id == "ada"] == [0, 1, 2]


@pytest.mark.anyio
async def test_a_poor_reply_is_kept_over_a_copy_when_every_draw_has_a_fault() -> None:
    # Draw 0 copies Ben, draw 1 is cut off: one fault each, and the copy is no reply at all.
    cut = "Nets or not, pigeons, aphids and snails eat the balcony…"
    speak = Draws(ada=(NETS, cut), ben=(NETS,))
    room = make_room("ben", "ada", topic=TOPIC, limits=Limits(max_turns=2, redraws=1))
    log, recorder = journal(room)
    with anyio.fail_after(GUARD):
        await RoomRunner(log, speak).run()
    assert [m.text for m in recorder.messages()] == [NETS, cut]
    assert weight(("repeats a message",)) > weight(("is cut off",))


@pytest.mark.anyio
async def test_without_redraws_every_reply_is_kept_as_it_comes() -> None:
    speak = Draws(ada=(SELF, GOOD), ben=(NETS,))
    live = await run_room(0, speak)
    assert live.messages()[0].text == SELF
    assert [r.agent_id for r in speak.requests] == ["ada", "ben"]
    assert all(d.redraw == "" for d in live.live)


@pytest.mark.anyio
async def test_a_persona_answers_a_later_draw_with_a_new_reply() -> None:
    """The real persona agent: draw 1 of an answered turn asks its model again."""
    ada = persona_agent("ada", "first", "second")
    room = make_room("ada", "ben", topic=TOPIC)
    plan = next_turn(room, ())
    assert plan is not None
    request = build_turn_request(room, (), plan)
    first = await ada.take_turn(request)
    again = await ada.take_turn(msgspec.structs.replace(request, draw=1))
    replayed = await ada.take_turn(request)
    assert (first.status, again.status, replayed.status) == ("spoken", "spoken", "replayed")
    assert len(ada.provider.calls) == 2  # type: ignore[attr-defined]
    assert replayed.text == again.text


class Streamed(Draws):
    """:class:`Draws`, each reply streamed in two pieces, once the watcher is there."""

    def __init__(self, **scripts: tuple[str, ...]) -> None:
        super().__init__(**scripts)
        self.go = anyio.Event()

    async def __call__(self, agent_id: str, request: TurnRequest) -> TurnReply:
        await self.go.wait()
        reply = await super().__call__(agent_id, request)
        half = len(reply.text) // 2
        report_delta(reply.text[:half])
        report_delta(reply.text[half:])
        return reply


async def describe(agent_id: str) -> Member:
    return Member(id=AgentId(agent_id), name=agent_id.capitalize(), role="participant")


@pytest.mark.anyio
async def test_a_watcher_sees_each_draw_open_the_turn_again_and_stream_afresh(
    tmp_path: Path,
) -> None:
    again = SELF.replace("Ben.", "Ben, on a balcony.")  # the same faults as the first draw
    speak = Streamed(ada=(SELF, again, GOOD), ben=(NETS,))
    limits = Limits(max_turns=2, retry_delay=0, redraws=2)
    spec = RoomSpec(topic=TOPIC, members=("ada", "ben"), limits=limits)
    async with RoomManager(tmp_path, speak=speak, describe=describe) as rooms:
        room = await rooms.create(spec)
        seen: list[tuple[object, ...]] = []
        with anyio.fail_after(GUARD):
            async with rooms.subscribe_live(room.id) as events:
                speak.go.set()
                async for event in events:
                    if isinstance(event, DeltaEvent):
                        seen.append((event.draw, event.at, event.text or event.redraw))
                    elif isinstance(event, MessageEvent):
                        seen.append(("MESSAGE", event.turn, event.text))
    why = "addresses itself; recites its instructions"
    half, rest = len(SELF) // 2, len(again) // 2
    assert (
        seen[:10]
        == [
            (0, 0, ""),
            (0, 0, SELF[:half]),
            (0, half, SELF[half:]),
            (1, 0, why),  # the turn opens again: what came before is set aside
            (1, 0, again[:rest]),
            (1, rest, again[rest:]),
            (2, 0, why),  # and again, for the same fault: each draw opens it
            (2, 0, GOOD[: len(GOOD) // 2]),
            (2, len(GOOD) // 2, GOOD[len(GOOD) // 2 :]),
            ("MESSAGE", 1, GOOD),
        ]
    )
    assert seen[10] == (0, 0, "")  # Ben's turn is a first draw again


def test_redraws_are_bounded_with_a_clear_error() -> None:
    spec = {"topic": "t", "members": ["a", "b"], "limits": {"redraws": 9}}
    with pytest.raises(InvalidRoomSpec, match="redraws"):
        decode_room_spec(msgspec.json.encode(spec))
    assert decode_room_spec(msgspec.json.encode({**spec, "limits": {"redraws": 5}})).limits
    assert RoomSpec(topic="t", members=("a", "b")).limits.redraws == 0
    review = {**spec, "mode": "review", "limits": {"redraws": 1}}
    with pytest.raises(InvalidRoomSpec, match="redraws are for a chat"):
        decode_room_spec(msgspec.json.encode(review))
