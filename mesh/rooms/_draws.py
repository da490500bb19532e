"""Which replies a room asks for again: the checks behind ``Limits.redraws``. Pure.

A small model now and then answers with its instructions instead of the
conversation ("You are Ben. You are talking with Ada. The topic: …"), writes
about the reply it was asked for ("Your answer should be one sentence"), or
says again what it is answering. None of these is a failed turn, and the loop
guard only sees the last kind, after the fact. A room with ``redraws`` set
checks each reply before it is recorded, and asks the same turn again with
the next seed while the reply has a fault, at most ``redraws`` times; then it
keeps the draw whose faults weigh least (:func:`weight`). The checks are
lexical, like the room's convergence score:

- **addresses itself**: "you are NAME" or "you're NAME", NAME its own name;
- **recites its instructions**: three or more runs of three words that are in the
  instructions (the system prompt and the turn prompt) and nowhere in what the
  member was shown of the conversation (the topic, the point, the messages);
- **talks about its reply**: "your answer", "the answer is", "a possible response",
  "one sentence" and the like;
- **repeats a message**: half or more of its runs of three words are in one
  message it was shown (its own or another's);
- **repeats the question**: three quarters of them are in the topic or the point;
- **is cut off**: its budget cut it with no sentence to end on (it ends with ``…``);
- **strays from the subject**: not one word of four letters or more (other than
  the commonest) in common with the topic, the point or the message it answers,
  comparing the first five letters ("watering" is "water");
- **ignores the message it answers**: it keeps to the subject but shares none of the
  words the last speaker added to it ("pigeons", "nets", "morning"), so it would read
  the same after any message;
- **narrates**: it speaks of another member in the third person ("Ben smiled",
  "Ben's point is"), or writes lines under a label ("Derek: …") as in a script,
  where a member of a conversation speaks to the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from mesh.rooms._budget import CUT_MARK

__all__ = ["reply_faults", "unlabelled", "weight"]

#: Runs of three words shared with the instructions (and not the conversation) that
#: make a recital: one or two are a turn of phrase, three are the prompt read back.
RECITAL_RUNS: Final = 3
#: The share of a reply's runs found in one shown message that makes it a repeat.
REPEAT_SHARE: Final = 0.5
#: The share that makes it the topic or the point asked back: higher, since an answer
#: may well restate its question ("It is worth growing vegetables on a balcony, …").
QUESTION_SHARE: Final = 0.75

_WORD = re.compile(r"[\w']+")
#: Words too common to say what a message is about (those of four letters or more).
_COMMON: Final = frozenset(
    _WORD.findall(
        "about also been because being could does doing don't each even from have here "
        "i'll i'm into it's just know like make many more most much must only other "
        "really right said same should some such sure than that that's their them then "
        "there these they thing think this those though very want well were what when "
        "where which while will with would yeah your you're yours agree disagree point"
    )
)
#: Words compared by their first letters: "vegetable" and "vegetables", "water" and "watering".
_STEM: Final = 5
_ABOUT_REPLY = re.compile(
    r"\b(?:your|my) (?:answer|reply|response)\b"
    r"|\bthe (?:answer|response) (?:is|will be|should be)\b"
    r"|\bpossible (?:answer|reply|response)\b"
    r"|\bthe answer to (?:my|your|the|this) question\b"
    r"|\bhere(?:'s| is) (?:the|a|my) (?:corrected |revised |new )?"
    r"(?:message|reply|response|answer)\b"
    r"|\bthe question has been\b"
    r"|\banswer [A-Z]\w*:"
    r"|\banswer (?:it|this|the question) correctly\b"
    r"|\b(?:one|a|two|three|full|short|single) sentences?\b"
    r"|\bjustification:"
    r"|\bcorrected version\b"
    r"|\bquestioner\b"
    r"|\bword (?:count|limit)\b",
    re.IGNORECASE,
)


def reply_faults(
    text: str,
    *,
    name: str,
    instructions: str,
    subject: Sequence[str],
    messages: Sequence[str],
    others: Sequence[str] = (),
    answers: str | None = None,
) -> tuple[str, ...]:
    """What is wrong with ``text`` as ``name``'s next message (empty: nothing).

    ``instructions`` is what the member was told (its system and turn prompts),
    ``subject`` what the conversation is about (the topic, the point),
    ``messages`` the messages it was shown, ``others`` the other members' names and
    ``answers`` the message it answers (another's, the last it was shown), if any.
    """
    shown = (*subject, *messages)
    runs = _runs(text)
    found = (
        _addresses_itself(text, name),
        _recites(runs, instructions, shown),
        _talks_about_its_reply(text, shown),
        "is cut off" if text.rstrip().endswith(CUT_MARK) else None,
        _repeats(runs, subject, messages),
        _strays(text, subject, messages, answers),
        "narrates" if _narrates(text, others) else None,
        "speaks as an assistant" if _ASSISTANT.search(text) else None,
    )
    return tuple(fault for fault in found if fault is not None)


def _addresses_itself(text: str, name: str) -> str | None:
    said = re.search(rf"\byou(?:'re|\u2019re| are) {re.escape(name)}\b", text, re.IGNORECASE)
    if said or re.search(rf"\b{re.escape(name)}\b", text):
        return "addresses itself"
    return None


def _recites(runs: set[tuple[str, ...]], instructions: str, shown: Sequence[str]) -> str | None:
    """Runs of the instructions in the reply that no shown text already had."""
    seen = set().union(*(_runs(part) for part in shown)) if shown else set()
    if len((runs & _runs(instructions)) - seen) >= RECITAL_RUNS:
        return "recites its instructions"
    return None


def _talks_about_its_reply(text: str, shown: Sequence[str]) -> str | None:
    if _ABOUT_REPLY.search(text) and not any(_ABOUT_REPLY.search(part) for part in shown):
        return "talks about its reply"
    return None


def _repeats(
    runs: set[tuple[str, ...]], subject: Sequence[str], messages: Sequence[str]
) -> str | None:
    """A message said again, or else the question."""
    if runs and any(len(runs & _runs(part)) >= REPEAT_SHARE * len(runs) for part in messages):
        return "repeats a message"
    if runs and any(len(runs & _runs(part)) >= QUESTION_SHARE * len(runs) for part in subject):
        return "repeats the question"
    return None


def _strays(
    text: str, subject: Sequence[str], messages: Sequence[str], answers: str | None
) -> str | None:
    """Off the subject and the last message; or else, deaf to what the answered one added."""
    stems = _stems(text)
    about = set().union(*(_stems(part) for part in (*subject, *messages[-1:])))
    if about and not stems & about:
        return "strays from the subject"
    if answers is not None:
        added = _stems(answers) - set().union(*(_stems(part) for part in subject))
        if added and not stems & added:
            return "ignores the message it answers"
    return None


#: Faults that make a draw no reply at all: the prompt, a message or the question said
#: again. They weigh more than those of a reply that is only poor (vague, off the subject,
#: cut off, or talking about itself), so a room keeps the poor reply over the copy.
_NO_REPLY: Final = frozenset(
    {"addresses itself", "recites its instructions", "repeats a message", "repeats the question"}
)


def weight(faults: Sequence[str]) -> int:
    """How bad a draw with ``faults`` is: 2 for each that makes it no reply, 1 for the rest."""
    return sum(2 if fault in _NO_REPLY else 1 for fault in faults)


def unlabelled(text: str, names: Sequence[str]) -> str:
    """``text`` without a leading label of a member's name ("Ben: …").

    A model that has read a transcript of ``Name: message`` lines sometimes writes
    its own reply the same way, under its own name or the one it answers; the room
    already says who speaks, and to whom.
    """
    pattern = "|".join(re.escape(name) for name in names if name)
    label = re.match(rf"\s*\**(?:{pattern})\**\s*:\s*", text, re.IGNORECASE) if pattern else None
    return text[label.end() :] if label and label.end() < len(text) else text


#: What follows a name when a reply tells of its owner instead of speaking to them.
_TOLD: Final = (
    r"(?:'s|\u2019s|\s+(?:is|was|smiled|smiles|said|says|replied|replies|added|adds|asked|"
    r"asks|laughed|laughs|nodded|nods|thinks|thought|loves|wants|believes)\b)"
)
#: What a chat model's assistant says to its user, and no member of a conversation does.
_ASSISTANT = re.compile(
    r"\b(?:happy|glad) to (?:help|assist)\b|\bhow (?:can|may) I (?:help|assist)\b"
    r"|\bwhat can I do for you\b|\bas an AI\b|\b(?:AI|personal|virtual) assistant\b"
    r"|\bsorry for (?:any|the) (?:confusion|misunderstanding)\b|\bsorry for your loss\b"
    r"|\bI(?:'m| am) (?:sorry|afraid), (?:but )?I can(?:no|')t\b",
    re.IGNORECASE,
)
#: A label opening the reply or a sentence in it: "Derek: …", as a script is written.
_LABEL = re.compile(r"(?:^|[.!?]\s+)[A-Z][a-z]+:\s")


def _narrates(text: str, others: Sequence[str]) -> bool:
    told = "|".join(re.escape(other) for other in others if other)
    if told and re.search(rf"\b(?:{told}){_TOLD}", text):
        return True
    if re.search(r"(?:^|[.!?]\s+)(?:He|She)\s", text):  # the one it talks to, as "he"
        return True
    return _LABEL.search(text) is not None


def _stems(text: str) -> set[str]:
    """The words of ``text`` that say what it is about, by their first letters."""
    words = _WORD.findall(text.casefold())
    return {word[:_STEM] for word in words if len(word) >= 4 and word not in _COMMON}


def _runs(text: str) -> set[tuple[str, ...]]:
    """The runs of three words in ``text`` (case folded)."""
    words = _WORD.findall(text.casefold())
    return set(_triples(words))


def _triples(words: Sequence[str]) -> Iterable[tuple[str, ...]]:
    return (tuple(words[i : i + 3]) for i in range(len(words) - 2))
