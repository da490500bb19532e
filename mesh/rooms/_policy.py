"""Who speaks next: round-robin in a chat, propose/implement/critique/verify in a review.

Pure functions of the room and its transcript, so a resumed room picks the same
speaker a room that never stopped would have picked.

A **chat** goes round the members in order, starting with the first, after the
previous speaker. A member who has sent ``max_messages_per_agent`` messages
stays silent and is skipped; once no one but the last speaker may still speak
there is no conversation left, and :func:`next_turn` returns ``None``.
People who are ``absent`` (away, or never joined) are skipped too, and a
person's interjection does not move the turn: the next speaker follows the last
message that was someone's turn, and a person who has just interjected is not
asked to speak again at once (when anyone else may).

A **review** is turn 1 *propose* (architect), then rounds of
*implement* (builder), *critique* (architect), *verify* (architect): turns 2-4
are round 1, 5-7 round 2, and so on. ``max_turns`` counts rounds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from mesh.rooms._events import MessageEvent
from mesh.rooms._model import Member, Room, Step

__all__ = ["REVIEW_CYCLE", "TurnPlan", "next_turn", "review_step"]

#: The steps of a review round, after the opening proposal, and who takes each
#: (0: the architect, 1: the builder).
REVIEW_CYCLE: Final[tuple[tuple[Step, int], ...]] = (
    ("implement", 1),
    ("critique", 0),
    ("verify", 0),
)


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """The next turn: its number, who speaks, and (in a review) the step and round."""

    turn: int
    speaker: Member
    step: Step | None = None
    round: int = 0


def review_step(turn: int) -> tuple[Step, int, int]:
    """``(step, member index, round)`` of a review's ``turn`` (counting from 1)."""
    if turn < 1:
        raise ValueError(f"turns count from 1, got {turn}")
    if turn == 1:
        return "propose", 0, 1
    step, who = REVIEW_CYCLE[(turn - 2) % len(REVIEW_CYCLE)]
    return step, who, (turn - 2) // len(REVIEW_CYCLE) + 1


def next_turn(
    room: Room, transcript: Sequence[MessageEvent], absent: Collection[str] = ()
) -> TurnPlan | None:
    """The turn after the transcript's last one, or ``None`` if no one may speak.

    ``absent``: member ids to pass over this time (people who are not there).
    """
    turn = transcript[-1].turn + 1 if transcript else 1
    spoken = Counter(message.agent_id for message in transcript)
    limit = room.limits.max_messages_per_agent
    if room.mode == "review":
        step, who, round_ = review_step(turn)
        speaker = room.members[who]
        if spoken[speaker.id] >= limit:
            return None
        return TurnPlan(turn, speaker, step, round_)
    may_speak = [m for m in room.members if spoken[m.id] < limit and m.id not in absent]
    # No one speaks twice in a row, so the room goes on while someone other than the last
    # speaker is under the limit: two members and 40 turns are 20 messages each.
    turns = [m for m in transcript if not m.interjection]
    last = turns[-1].agent_id if turns else None
    if not any(m.id != last for m in may_speak):
        return None
    # Who interjected since the last turn has just spoken: the others go first.
    just_spoke = set()
    for message in reversed(transcript):
        if not message.interjection:
            break
        just_spoke.add(message.agent_id)
    others = [m for m in may_speak if m.id not in just_spoke]
    if any(m.id != last for m in others):
        may_speak = others
    return TurnPlan(turn, _after(room, transcript, may_speak))


def _after(room: Room, transcript: Sequence[MessageEvent], may_speak: list[Member]) -> Member:
    turns = [m for m in transcript if not m.interjection]
    if not turns:
        return may_speak[0]
    ids: list[str] = [m.id for m in room.members]
    last = ids.index(turns[-1].agent_id) if turns[-1].agent_id in ids else -1
    allowed = {m.id for m in may_speak}
    for step in range(1, len(ids) + 1):
        candidate = room.members[(last + step) % len(ids)]
        if candidate.id in allowed:
            return candidate
    raise AssertionError("may_speak holds someone besides the last speaker")  # pragma: no cover
