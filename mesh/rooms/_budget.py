"""Budgets for a turn: how much of the room a member is shown, and how a reply ends. Pure.

**Context.** A member is shown the last ``context_messages`` messages, and of
those the newest that fit ``context_tokens`` (the member's own budget, else the
room's): so the prompt, and the time to a reply's first word, stop growing
with the room. What fell out is not lost without a trace: the opening message
carries a short summary of it (how many messages, and the first sentence of
each speaker's latest one). Tokens are estimated at four characters each, the
usual ratio for English with the common tokenizers; it only has to bound the
prompt, not count it exactly.

**Replies.** A reply cut by its token budget (``finish_reason`` ``length``) ends
at its last full sentence when that keeps at least half of it; otherwise it
ends at its last whole word with an ellipsis, so a reader sees it was cut.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from mesh.rooms._events import MessageEvent
from mesh.rooms._model import Member, Room

__all__ = [
    "CHARS_PER_TOKEN",
    "CUT_MARK",
    "context_budget",
    "end_of_reply",
    "estimate_tokens",
    "first_sentence",
    "fit_context",
    "reply_budget",
    "summary_of",
]

CHARS_PER_TOKEN: Final = 4
#: How a reply cut short with no sentence to end on shows it was cut.
CUT_MARK: Final = "…"
#: The summary of what fell out quotes at most this many speakers, this many words each.
_SUMMARY_SPEAKERS: Final = 4
_SUMMARY_WORDS: Final = 16
#: A sentence ends at ``.``, ``!`` or ``?`` (closing quotes and brackets after it),
#: followed by whitespace or the end: "3.5" and "e.g.," do not end one.
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]*_]*(?=\s|$)")


def estimate_tokens(text: str) -> int:
    """About how many tokens ``text`` is (at least 1)."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def context_budget(room: Room, member: Member) -> int | None:
    """The tokens of transcript ``member`` may be shown (None: no budget)."""
    return member.context_tokens or room.limits.context_tokens


def reply_budget(room: Room, member: Member) -> int | None:
    """The room's budget for one of ``member``'s replies, in tokens (None: the persona's)."""
    return member.reply_tokens or room.limits.reply_tokens


def fit_context(
    room: Room, transcript: Sequence[MessageEvent], member: Member
) -> tuple[Sequence[MessageEvent], Sequence[MessageEvent]]:
    """``(dropped, shown)``: the newest messages within the member's budgets, and the rest.

    The newest message is always shown, whatever its size: it is what the turn answers.
    """
    limit = room.limits.context_messages
    start = max(0, len(transcript) - limit) if limit is not None else 0
    budget = context_budget(room, member)
    if budget is not None:
        used = 0
        for index in range(len(transcript) - 1, start - 1, -1):
            message = transcript[index]
            used += estimate_tokens(message.name) + estimate_tokens(message.text)
            if used > budget and index < len(transcript) - 1:
                start = index + 1
                break
    return transcript[:start], transcript[start:]


def first_sentence(text: str, words: int = _SUMMARY_WORDS) -> str:
    """The first sentence of ``text``, at most ``words`` words (then an ellipsis)."""
    flat = " ".join(text.split())
    end = _SENTENCE_END.search(flat)
    sentence = flat[: end.end()] if end else flat
    kept = sentence.split()
    return sentence if len(kept) <= words else " ".join(kept[:words]) + CUT_MARK


def summary_of(dropped: Sequence[MessageEvent]) -> str:
    """A short account of messages no longer shown ("" when there are none)."""
    if not dropped:
        return ""
    latest: dict[str, MessageEvent] = {}
    for message in reversed(dropped):
        latest.setdefault(message.agent_id, message)
    quoted = list(latest.values())[:_SUMMARY_SPEAKERS][::-1]
    said = "; ".join(f'{m.name} said "{first_sentence(m.text)}"' for m in quoted)
    count = "1 earlier message" if len(dropped) == 1 else f"{len(dropped)} earlier messages"
    return f"Earlier ({count}, no longer shown): {said}."


def end_of_reply(text: str, cut: bool) -> str:
    """``text``, ended cleanly if it was ``cut`` by its budget (see the module docstring)."""
    text = text.strip()
    if not cut or not text:
        return text
    ends = list(_SENTENCE_END.finditer(text))
    if ends and ends[-1].end() * 2 >= len(text):
        return text[: ends[-1].end()]
    words = text.rsplit(maxsplit=1)
    kept = words[0] if len(words) > 1 else text  # the last word may be half of one
    return kept.rstrip(" ,;:-\u2013\u2014") + CUT_MARK
