"""The room as one member sees it (each member's own role transformation). Pure functions.

Language models are trained to answer a ``user`` as the ``assistant``; in a room
every agent is an assistant. So each member is shown the transcript turned
around: its own messages as ``assistant``, everyone else's as ``user`` with the
speaker's name (providers write it as a ``"Name: "`` prefix), after an opening
``user`` message that states the topic. The system prompt names the member and
the others; the awareness level decides how much more it says:

``basic``         names and topic only: the others could be people
``intermediate``  the others are AI agents, with their roles
``high``          the whole set-up: room id, turn order, turn limit, exit rules, recording

The room's level wins; without one each member's persona level applies, and
``basic`` without either. The persona puts its own system prompt before this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from mesh.providers._base import ChatMessage
from mesh.rooms._budget import first_sentence, fit_context, reply_budget, summary_of
from mesh.rooms._draws import reply_faults
from mesh.rooms._events import MessageEvent
from mesh.rooms._model import Awareness, Member, Room, Step, TurnRequest
from mesh.rooms._policy import TurnPlan

__all__ = [
    "STEP_INSTRUCTIONS",
    "awareness_of",
    "build_turn_request",
    "faults_of",
    "opening",
    "perspective_messages",
    "system_prompt",
    "turn_prompt",
]

#: What each review step asks of its speaker (docs/rooms.md).
STEP_INSTRUCTIONS: Final[dict[Step, str]] = {
    "propose": (
        "You are the architect. Propose a plan for the task: its scope, the steps, "
        "and a checklist the builder's change must satisfy."
    ),
    "implement": (
        "You are the builder. Implement the plan, addressing the architect's latest "
        "critique. Reply with a unified diff only."
    ),
    "critique": (
        "You are the architect. Critique the builder's latest diff against the plan "
        "and its checklist: say what is missing or wrong."
    ),
    "verify": (
        "You are the architect. Decide whether the latest diff meets the scope and the "
        'checklist. If it does, begin your reply with "{prefix}" (for example '
        '"{prefix}: meets scope & checklist."); if not, say what remains.'
    ),
}

#: How far apart the seeds of one turn's draws are: no draw takes another turn's seed.
_DRAW_SEEDS: Final = 1 << 20

#: How much of the last speaker's message the turn prompt quotes.
_QUOTE_WORDS: Final = 30

_CHAT_STYLE: Final = (
    "Reply with your next message only, in your own voice, building on what was said."
)


def opening(room: Room, summary: str = "") -> ChatMessage:
    """The first message everyone sees: the topic, or the task (and what fell out of view)."""
    if room.mode == "review":
        content = f"Task: {room.topic}"
    else:
        content = f"Discussion topic: {room.topic}\n\nPlease share your initial thoughts."
    return ChatMessage(role="user", content=f"{content}\n\n{summary}" if summary else content)


def perspective_messages(
    room: Room, transcript: Sequence[MessageEvent], member: str
) -> tuple[ChatMessage, ...]:
    """The opening, then the transcript within ``member``'s budgets, as ``member`` sees it.

    The budgets (``context_messages``, ``context_tokens``) are :func:`fit_context`'s;
    the opening sums up what they left out.
    """
    dropped, shown = fit_context(room, transcript, room.member(member))
    turned = (
        ChatMessage(role="assistant", content=m.text)
        if m.agent_id == member
        else ChatMessage(role="user", content=m.text, name=m.name)
        for m in shown
    )
    return (opening(room, summary_of(dropped)), *turned)


def awareness_of(room: Room, member: Member) -> Awareness:
    return room.awareness or member.awareness or "basic"


def system_prompt(
    room: Room,
    member: Member,
    plan: TurnPlan | None = None,
    transcript: Sequence[MessageEvent] = (),
    point: str | None = None,
) -> str:
    """The room's part of ``member``'s system prompt, for the turn in ``plan``.

    In a chat it ends with the turn prompt: who spoke last and what they said, so
    the member answers them rather than the topic in general (see :func:`turn_prompt`),
    unless the room puts it at the end of the last message (``turn_prompt="message"``).
    """
    level = awareness_of(room, member)
    others = [m for m in room.members if m.id != member.id]
    parts = [_who(member, others, level), _topic(room)]
    if level == "high":
        parts.append(_setting(room, plan))
    opens = plan is not None and not transcript
    parts.append(_task(room, member, plan, opens=opens))
    if room.mode == "chat" and plan is not None and room.turn_prompt == "system":
        parts.append(turn_prompt(room, transcript, member, point))
    return "\n\n".join(part for part in parts if part)


def turn_prompt(
    room: Room, transcript: Sequence[MessageEvent], member: Member, point: str | None = None
) -> str:
    """What this turn asks of ``member``: answer the last speaker, on the topic, briefly.

    The topic is restated every turn: after a few replies it has fallen out of a small
    context budget, and a small model otherwise drifts to whatever was said last. In a
    room with an agenda, ``point`` (the one the room is on) is named first.
    """
    last = next((m for m in reversed(transcript) if m.agent_id != member.id), None)
    budget = reply_budget(room, member)
    size = f"at most {_words(budget)} words" if budget else "two or three short paragraphs"
    now = f"Now the point is: {_sentence(point)} " if point else ""
    if room.turn_prompt == "message":
        return _message_prompt(room, last, now, size)
    if last is None:
        ask = f"You speak first: give your own view on {_quoted_topic(room)}"
    else:
        ask = (
            f'{last.name} spoke last and said: "{first_sentence(last.text, _QUOTE_WORDS)}" '
            f"Answer {last.name} directly: agree or disagree with that point and say why, "
            "then add one new point of your own"
        )
    topic = f"Stay on the topic, {_quoted_topic(room)}"
    return f"{now}{ask}. {topic}. Reply in {size}, ending with a full sentence."


def _message_prompt(room: Room, last: MessageEvent | None, now: str, size: str) -> str:
    """The turn prompt at the end of the last message: short, since the words it answers
    are right above it (quoting them again only invites an echo)."""
    if last is None:
        about = "" if now else f" on {_quoted_topic(room)}"
        ask = f"You speak first: what is your view{about}?"
    else:
        ask = f"Answer {last.name}: agree or disagree, and say why."
    return f"{now}{ask} Reply in {size}, ending with a full sentence."


def build_turn_request(
    room: Room,
    transcript: Sequence[MessageEvent],
    plan: TurnPlan,
    *,
    point: str | None = None,
    draw: int = 0,
) -> TurnRequest:
    """Everything the speaker of ``plan`` needs to take its turn (on agenda ``point``).

    ``draw`` counts the times the turn was asked again (``Limits.redraws``); each
    draw has a seed of its own.
    """
    return TurnRequest(
        room_id=room.id,
        turn=plan.turn,
        agent_id=plan.speaker.id,
        system=system_prompt(room, plan.speaker, plan, transcript, point),
        messages=_with_turn_prompt(
            room, transcript, plan, perspective_messages(room, transcript, plan.speaker.id), point
        ),
        step=plan.step,
        timeout=room.limits.turn_timeout,
        max_tokens=reply_budget(room, plan.speaker),
        seed=None if room.seed is None else (room.seed + plan.turn + draw * _DRAW_SEEDS) % 2**31,
        # The same after a restart or a take-over (the room's record keeps it), so a
        # retried turn is still recognised; new when the id is used again.
        epoch=str(room.created_at),
        draw=draw,
    )


def faults_of(
    room: Room,
    transcript: Sequence[MessageEvent],
    plan: TurnPlan,
    text: str,
    *,
    point: str | None = None,
) -> tuple[str, ...]:
    """What is wrong with ``text`` as the reply to ``plan``'s turn (see ``reply_faults``)."""
    speaker = plan.speaker
    _, shown = fit_context(room, transcript, speaker)
    told = system_prompt(room, speaker, plan, transcript, point)
    if room.mode == "chat":
        told = f"{told}\n\n{turn_prompt(room, transcript, speaker, point)}"
    last = shown[-1] if shown else None
    return reply_faults(
        text,
        name=speaker.name,
        instructions=told,
        subject=(room.topic, point or ""),
        messages=[message.text for message in shown],
        others=[member.name for member in room.members if member.id != speaker.id],
        answers=last.text if last is not None and last.agent_id != speaker.id else None,
    )


def _with_turn_prompt(
    room: Room,
    transcript: Sequence[MessageEvent],
    plan: TurnPlan,
    messages: tuple[ChatMessage, ...],
    point: str | None,
) -> tuple[ChatMessage, ...]:
    """``messages``, with the turn prompt at the end of the last one (``turn_prompt="message"``).

    The last message is the one the member answers (the last speaker's, or the opening);
    in the rare case it is the member's own, the prompt comes as a message of its own.
    """
    if room.mode != "chat" or room.turn_prompt != "message":
        return messages
    prompt = turn_prompt(room, transcript, plan.speaker, point)
    last = messages[-1]
    if last.role != "user":
        return (*messages, ChatMessage(role="user", content=prompt))
    asked = msgspec.structs.replace(last, content=f"{last.content}\n\n{prompt}")
    return (*messages[:-1], asked)


def _sentence(text: str) -> str:
    """``text`` ending as a sentence does (a question keeps its mark)."""
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else f"{text}."


def _quoted_topic(room: Room) -> str:
    return f'"{room.topic.rstrip(" ?.!")}"'


def _words(tokens: int) -> int:
    """Words that fit ``tokens`` with room to finish the sentence (about 3/4 word a token)."""
    return max(5, tokens * 3 // 5)


def _names(members: Sequence[str]) -> str:
    if len(members) == 1:
        return members[0]
    return f"{', '.join(members[:-1])} and {members[-1]}"


def _who(member: Member, others: Sequence[Member], level: Awareness) -> str:
    if level == "basic":
        return f"You are {member.name}. You are talking with {_names([m.name for m in others])}."
    agents = [f"{m.name} ({m.role})" for m in others if not m.human]
    people = [m.name for m in others if m.human]
    company = [f"other AI agents: {_names(agents)}"] if agents else []
    if people:
        company.append(f"{'a person' if len(people) == 1 else 'people'}: {_names(people)}")
    return (
        f"You are {member.name}, the {member.role}. You are talking with "
        f"{', and with '.join(company)}. Their messages reach you prefixed with their names."
    )


def _topic(room: Room) -> str:
    return f"The task: {room.topic}" if room.mode == "review" else f"The topic: {room.topic}"


def _setting(room: Room, plan: TurnPlan | None) -> str:
    order = _names([m.name for m in room.members])
    if room.mode == "review":
        pace = f"This is round {plan.round if plan else 1} of at most {room.max_turns}."
        how = f"It is a review: {order} take turns to propose, implement, critique and verify."
    else:
        pace = f"This is turn {plan.turn if plan else 1} of at most {room.max_turns}."
        how = f"{order} speak in turn, round-robin."
    return (
        f"This is room {room.id} of agent-mesh, an experiment in conversation between AI "
        f"agents. {how} {pace} Everything said is recorded. {_endings(room)}"
    )


def _endings(room: Room) -> str:
    rules = room.rules
    ends = ["when the turn limit is reached"]
    verifier = room.verifier()
    if verifier is not None:
        name = room.member(verifier).name
        ends.append(f'when {name} starts a message with "{rules.verified_prefix}"')
    if rules.goodbye and room.mode == "chat":
        ends.append(f'when someone says "{rules.goodbye.capitalize()}"')
    if rules.no_improvement:
        ends.append("when someone repeats their previous message")
    if rules.repetition_threshold is not None and room.mode == "chat":
        ends.append("when someone says nearly what was already said")
    if rules.convergence_threshold is not None:
        ends.append("when the messages become nearly the same")
    return f"The room ends {_names(ends)}."


def _task(room: Room, member: Member, plan: TurnPlan | None, *, opens: bool = False) -> str:
    """The standing instructions; ``opens``: this turn opens the room."""
    rules = room.rules
    if room.mode == "review":
        step = plan.step if plan is not None and plan.step is not None else None
        return STEP_INSTRUCTIONS[step].format(prefix=rules.verified_prefix) if step else ""
    lines = [_CHAT_STYLE]
    # Not to the opener: there is nothing to end yet, and a small model told how a
    # conversation ends tends to open by saying it has ended.
    if rules.goodbye and not opens:
        lines.append(
            "When the conversation has reached its natural end, finish your message with "
            f'the word "{rules.goodbye.capitalize()}".'
        )
    if room.verifier() == member.id:
        lines.append(
            "If you judge that the discussion has reached a sound conclusion, start your "
            f'message with "{rules.verified_prefix}".'
        )
    return " ".join(lines)
