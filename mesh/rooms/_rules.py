"""When a room stops on its own: the convergence score and the exit rules. Pure functions.

**Score** (docs/rooms.md). After every message, the mean over pairs of members of
the similarity of their latest messages (0 until two members have spoken). The
similarity of two texts is ``0.6 * jaccard + 0.4 * length_ratio``, where
``jaccard`` is the overlap of their sets of words (lowercased, ``[\\w']+``) and
``length_ratio`` is the shorter word count over the longer; identical texts
score 1, texts with no word in common and very different lengths near 0.

**Rules**, checked after each message in this order (the first that fires wins):

1. ``CONVERGED``: the verifier's message starts with the verified prefix
   (``Verified``, case-sensitive, after leading whitespace and Markdown ``*_#>```);
   in a review only at the *verify* step.
2. ``GOODBYE`` (chat): the goodbye word is the message's first or last word,
   case-insensitively, ignoring punctuation: "Goodbye!", "Thanks, all. Goodbye."
   and "Goodbye, Bob: it was a pleasure" all count; "I won't say goodbye yet" does not.
3. ``NO_IMPROVEMENT``: the message is the same (whitespace aside) as the one
   before it or as its speaker's previous message; in a review only the
   builder's diffs are compared. With ``repetition_threshold`` (the loop guard,
   chat only) also when its similarity to its speaker's previous message reaches
   the threshold, or the convergence score reached it on this message and the
   one before: the members have started to say the same things over again.
4. ``CONVERGED``: the score reached ``convergence_threshold`` (off by default).
5. ``MAX_TURNS``: the turn limit (a review: the verify step of the last round).

**An agenda** (a chat's list of points): the rules look only at the messages on
the current point, and what would end the room ``NO_IMPROVEMENT`` moves it to
the next point instead (:class:`NextPoint`), but on the last; with
``turns_per_point`` it moves on after that many messages on a point too, and
ends ``MAX_TURNS`` after that many on the last.

A person's message (a member of kind ``human``) fires only ``MAX_TURNS``: the
rules 1-4 end a room for good, and a room is ended for good by its agents or by
its owner's ``stop``, never by the words of a guest.

Before each turn: ``MAX_TURNS`` when no one may speak (message limits), and
``AGENT_LOST`` when a member has been offline for ``agent_grace``. After a failed
attempt: ``ERROR`` when ``max_failures`` attempts in a row have failed, or at once
when the error would only repeat (:data:`PERMANENT`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from mesh._errors import ErrorCode
from mesh.rooms._events import MessageEvent
from mesh.rooms._model import Room, StopReason
from mesh.rooms._policy import next_turn, review_step

__all__ = [
    "JACCARD_WEIGHT",
    "LENGTH_WEIGHT",
    "NextPoint",
    "Verdict",
    "after_message",
    "before_turn",
    "check_agent_lost",
    "check_failures",
    "convergence_score",
    "is_verified",
    "judge",
    "lost_deadline",
    "same_output",
    "says_goodbye",
    "similarity",
]

#: Errors the same turn would meet again (the member serves no room/turn, refuses the
#: room, or rejects its request): the room stops at once instead of retrying.
PERMANENT: Final = frozenset(
    {
        ErrorCode.METHOD_NOT_FOUND,
        ErrorCode.INVALID_PARAMS,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.FORBIDDEN,
    }
)

#: Word overlap says the two are about the same things; the length ratio keeps a
#: one-line "I agree" from scoring like a full answer that shares its words.
JACCARD_WEIGHT: Final = 0.6
LENGTH_WEIGHT: Final = 0.4

_SCORE_WORD = re.compile(r"[\w']+")
_WORD = re.compile(r"\w+")
_MARKDOWN_LEAD = " \t\r\n*_#>`"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A rule fired: the room stops for ``reason``; ``detail`` says why in words."""

    reason: StopReason
    detail: str


@dataclass(frozen=True, slots=True)
class NextPoint:
    """The room moves on to agenda point ``index``; ``detail`` says why in words."""

    index: int
    detail: str


# -- the score ---------------------------------------------------------------------------


def similarity(a: str, b: str) -> float:
    """How alike two messages are, in [0, 1]; see the module docstring."""
    words_a = _SCORE_WORD.findall(a.casefold())
    words_b = _SCORE_WORD.findall(b.casefold())
    if not words_a or not words_b:
        return 1.0 if words_a == words_b else 0.0
    set_a, set_b = set(words_a), set(words_b)
    jaccard = len(set_a & set_b) / len(set_a | set_b)
    ratio = min(len(words_a), len(words_b)) / max(len(words_a), len(words_b))
    return round(JACCARD_WEIGHT * jaccard + LENGTH_WEIGHT * ratio, 4)


def convergence_score(transcript: Sequence[MessageEvent]) -> float:
    """The mean similarity of every pair of members' latest messages."""
    latest: dict[str, str] = {}
    for message in reversed(transcript):
        latest.setdefault(message.agent_id, message.text)
    pairs = list(itertools.combinations(latest.values(), 2))
    if not pairs:
        return 0.0
    return round(sum(similarity(a, b) for a, b in pairs) / len(pairs), 4)


# -- the text tests ----------------------------------------------------------------------


def is_verified(text: str, prefix: str) -> bool:
    return text.lstrip(_MARKDOWN_LEAD).startswith(prefix)


def says_goodbye(text: str, marker: str) -> bool:
    words = _WORD.findall(text.casefold())
    wanted = _WORD.findall(marker.casefold())
    if not wanted or len(words) < len(wanted):
        return False
    return words[: len(wanted)] == wanted or words[-len(wanted) :] == wanted


def same_output(a: str, b: str) -> bool:
    return a.split() == b.split()


# -- the rules ---------------------------------------------------------------------------


def after_message(room: Room, transcript: Sequence[MessageEvent]) -> Verdict | None:
    """The rule the transcript's last message fires, if any (in the documented order)."""
    message = transcript[-1]
    if _from_person(room, message):
        return _max_turns(room, message)
    return (
        _verified(room, message)
        or _goodbye(room, message)
        or _no_improvement(room, transcript)
        or _converged(room, message)
        or _max_turns(room, message)
    )


def judge(
    room: Room, transcript: Sequence[MessageEvent], point: int | None = None, since: int = 0
) -> Verdict | NextPoint | None:
    """:func:`after_message` for a room on agenda point ``point``, whose messages are
    ``transcript[since:]``: a loop on a point that is not the last moves the room on."""
    if not room.agenda:
        return after_message(room, transcript)
    index, on_point = point or 0, transcript[since:]
    if not on_point:
        return None
    verdict = after_message(room, on_point)
    last = index + 1 >= len(room.agenda)
    if verdict is not None:
        if verdict.reason is StopReason.NO_IMPROVEMENT and not last:
            return NextPoint(index + 1, verdict.detail)
        return verdict
    limit = room.limits.turns_per_point
    said = [m for m in on_point if not m.interjection]
    if limit is None or len(said) < limit:
        return None
    detail = f"{len(said)} turns on point {index + 1}"
    if last:
        return Verdict(StopReason.MAX_TURNS, f"{detail}, the agenda's last: the limit per point")
    return NextPoint(index + 1, f"{detail}: the limit per point")


def _from_person(room: Room, message: MessageEvent) -> bool:
    return any(m.id == message.agent_id and m.human for m in room.members)


def before_turn(room: Room, transcript: Sequence[MessageEvent]) -> Verdict | None:
    """Whether the room is already over before its next turn (limits reached)."""
    if transcript and room.mode == "chat" and transcript[-1].turn >= room.max_turns:
        return Verdict(StopReason.MAX_TURNS, f"reached the limit of {room.max_turns} turns")
    if next_turn(room, transcript) is None:
        limit = room.limits.max_messages_per_agent
        return Verdict(
            StopReason.MAX_TURNS,
            f"no one but the last speaker is under the limit of {limit} messages each",
        )
    return None


def lost_deadline(room: Room, away: Mapping[str, float]) -> float | None:
    """When the first absent member (``away`` maps ids to when they left) is lost."""
    return min(away.values()) + room.rules.agent_grace if away else None


def check_agent_lost(room: Room, away: Mapping[str, float], now: float) -> Verdict | None:
    grace = room.rules.agent_grace
    lost = [agent for agent, since in away.items() if now - since >= grace]
    if not lost:
        return None
    names = ", ".join(room.member(agent).name for agent in lost)
    return Verdict(StopReason.AGENT_LOST, f"{names} stayed offline for {grace:g} s")


def check_failures(
    room: Room, failures: int, turn: int, error: str, code: int | None = None
) -> Verdict | None:
    if code in PERMANENT:
        return Verdict(StopReason.ERROR, f"turn {turn} failed, and would fail again: {error}")
    if failures < room.rules.max_failures:
        return None
    return Verdict(StopReason.ERROR, f"turn {turn} failed {failures} times in a row: {error}")


def _verified(room: Room, message: MessageEvent) -> Verdict | None:
    if message.agent_id != room.verifier():
        return None
    if room.mode == "review" and message.step != "verify":
        return None
    if not is_verified(message.text, room.rules.verified_prefix):
        return None
    return Verdict(StopReason.CONVERGED, f"{message.name} verified at turn {message.turn}")


def _goodbye(room: Room, message: MessageEvent) -> Verdict | None:
    marker = room.rules.goodbye
    if room.mode != "chat" or marker is None or not says_goodbye(message.text, marker):
        return None
    return Verdict(StopReason.GOODBYE, f"{message.name} said goodbye at turn {message.turn}")


def _no_improvement(room: Room, transcript: Sequence[MessageEvent]) -> Verdict | None:
    if not room.rules.no_improvement:
        return None
    message, earlier = transcript[-1], transcript[:-1]
    if room.mode == "review":
        if message.step != "implement":
            return None
        earlier = [m for m in earlier if m.step == "implement"]
        compared = earlier[-1:]
    else:
        own = [m for m in earlier if m.agent_id == message.agent_id]
        compared = [*earlier[-1:], *own[-1:]]
    for before in compared:
        if same_output(before.text, message.text):
            return Verdict(
                StopReason.NO_IMPROVEMENT,
                f"turn {message.turn} ({message.name}) repeats turn {before.turn}",
            )
    if room.mode == "chat":
        return _looping(room, transcript)
    return None


def _looping(room: Room, transcript: Sequence[MessageEvent]) -> Verdict | None:
    """The loop guard: near repeats, by the similarity the convergence score is made of."""
    threshold = room.rules.repetition_threshold
    if threshold is None:
        return None
    message = transcript[-1]
    own = [m for m in transcript[:-1] if m.agent_id == message.agent_id]
    if own and (alike := similarity(own[-1].text, message.text)) >= threshold:
        return Verdict(
            StopReason.NO_IMPROVEMENT,
            f"turn {message.turn} ({message.name}) is {alike:.2f} alike to their turn "
            f"{own[-1].turn} (the loop guard: {threshold:.2f})",
        )
    scored = [m for m in transcript if not _from_person(room, m)][-2:]
    if len(scored) == 2 and all(m.score >= threshold for m in scored):
        return Verdict(
            StopReason.NO_IMPROVEMENT,
            f"the convergence score stayed at {threshold:.2f} or above for turns "
            f"{scored[0].turn} and {scored[1].turn}: the conversation is going round",
        )
    return None


def _converged(room: Room, message: MessageEvent) -> Verdict | None:
    threshold = room.rules.convergence_threshold
    if threshold is None or message.score < threshold:
        return None
    return Verdict(
        StopReason.CONVERGED,
        f"convergence score {message.score:.2f} reached {threshold:.2f} at turn {message.turn}",
    )


def _max_turns(room: Room, message: MessageEvent) -> Verdict | None:
    if room.mode == "review":
        step, _, round_ = review_step(message.turn)
        if step == "verify" and round_ >= room.max_turns:
            return Verdict(
                StopReason.MAX_TURNS, f"{room.max_turns} review rounds without verification"
            )
        return None
    if message.turn >= room.max_turns:
        return Verdict(StopReason.MAX_TURNS, f"reached the limit of {room.max_turns} turns")
    return None
