# ruff: noqa: RUF001, RUF002 -- the look-alike letters are the point of this module
"""People in a room: who is there, the message a person's turn waits for, interjections.

A person (a member of kind ``human``) is *present* while they have joined and
not left or been skipped for not answering; that is runtime state, like an
agent's registry status, and a restarted daemon starts with nobody present
(their pages and terminals reconnect and join again). The :class:`Desk` of a
room holds it, and is the one place a person's words pass through on their way
to the engine, which records them:

- during their own turn, :meth:`Desk.offer` hands the text to the engine waiting
  in :meth:`Desk.wait_for`;
- at any other time (where the room allows interjections) it is queued, one
  message per person, and the engine records it after the turn in flight;
- during their own turn, :meth:`Desk.pass_turn` ends it with nothing said: the
  room goes on with the next speaker, and asks them again after that.

Everything here is synchronous but the engine's waits, so a manager can call it
from any task without locks.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final, Literal

import anyio

from mesh._errors import Forbidden
from mesh.rooms._errors import RoomConflict
from mesh.rooms._model import Room

__all__ = [
    "MAX_NAME",
    "MAX_TEXT",
    "PASSED",
    "Desk",
    "Passed",
    "check_join",
    "check_lookalike",
    "check_seat",
    "clean_name",
    "clean_text",
    "person_id",
    "skeleton",
]

#: The longest message a person may send (a long paragraph; a room is a conversation).
MAX_TEXT: Final = 8000
#: The longest display name.
MAX_NAME: Final = 64


class Passed:
    """What a person's turn ends with when they pass it (see :meth:`Desk.pass_turn`)."""

    def __repr__(self) -> str:
        return "PASSED"


PASSED: Final = Passed()

_SLUG = re.compile(r"[^a-z0-9._-]+")


def _printable(text: str, *, keep_newlines: bool) -> str:
    allowed = {"\n", "\t"} if keep_newlines else set()
    return "".join(
        ch for ch in text if ch in allowed or not unicodedata.category(ch).startswith("C")
    )


def clean_name(name: str) -> str:
    """A display name: control characters removed, spaces trimmed; ``ValueError`` if bad."""
    cleaned = " ".join(_printable(name, keep_newlines=False).split())
    if not cleaned:
        raise ValueError("a name needs at least one visible character")
    if len(cleaned) > MAX_NAME:
        raise ValueError(f"a name has at most {MAX_NAME} characters, got {len(cleaned)}")
    return cleaned


def clean_text(text: str) -> str:
    """A message: control characters but newlines and tabs removed; ``ValueError`` if bad."""
    cleaned = _printable(text, keep_newlines=True).strip()
    if not cleaned:
        raise ValueError("the message is empty")
    if len(cleaned) > MAX_TEXT:
        raise ValueError(f"a message has at most {MAX_TEXT} characters, got {len(cleaned)}")
    return cleaned


#: Letters of other scripts that pass for Latin ones (the common part of Unicode's
#: confusables table: Cyrillic, Greek, and the digits and capitals read as letters).
#: Applied before and after case folding, so capitals are covered by their small forms.
_HOMOGLYPHS: Final = str.maketrans(
    {
        **dict.fromkeys("аɑα", "a"),
        **dict.fromkeys("вβь", "b"),
        **dict.fromkeys("сϲς", "c"),
        **dict.fromkeys("ԁ", "d"),
        **dict.fromkeys("еєε", "e"),
        **dict.fromkeys("һηн", "h"),
        **dict.fromkeys("іιї", "i"),
        **dict.fromkeys("ј", "j"),
        **dict.fromkeys("кκ", "k"),
        **dict.fromkeys("ӏI1|ǀ", "l"),
        **dict.fromkeys("мμ", "m"),
        **dict.fromkeys("ոν", "n"),
        **dict.fromkeys("оοσ0", "o"),
        **dict.fromkeys("рρ", "p"),
        **dict.fromkeys("ԛ", "q"),
        **dict.fromkeys("ѕ", "s"),
        **dict.fromkeys("тτ", "t"),
        **dict.fromkeys("υ", "u"),
        **dict.fromkeys("ѵ", "v"),
        **dict.fromkeys("ԝω", "w"),
        **dict.fromkeys("хχ", "x"),
        **dict.fromkeys("уγ", "y"),
        **dict.fromkeys("ᴢ", "z"),
    }
)


def skeleton(name: str) -> str:
    """What ``name`` looks like: two names with one skeleton pass for each other.

    NFKC (fullwidth and styled letters become plain), homoglyphs of other scripts
    mapped to the Latin letter they imitate, case folded, accents, spaces and
    punctuation dropped, and ``rn`` read as ``m``: ``Cаrol`` (a Cyrillic ``а``),
    ``ＣＡＲＯＬ``, ``Caro1`` and ``Carol`` share ``carol``.
    """
    text = unicodedata.normalize("NFKC", name).translate(_HOMOGLYPHS).casefold()
    text = unicodedata.normalize("NFD", text.translate(_HOMOGLYPHS))
    kept = "".join(ch for ch in text if ch.isalnum() and not unicodedata.combining(ch))
    return kept.replace("rn", "m")


def person_id(name: str) -> str:
    """The member id a person's name gives: its lowercase slug (``Carol Ann`` → ``carol-ann``)."""
    slug = _SLUG.sub("-", name.lower()).strip("-.")[:MAX_NAME]
    return slug or "person"


class Desk:
    """The people of one room: presence, the awaited answer, queued interjections."""

    def __init__(self) -> None:
        self.present: set[str] = set()
        #: Who holds each present person's seat (a daemon identity; None: anyone may).
        self.holders: dict[str, str | None] = {}
        self._queued: dict[str, str] = {}
        self._awaited: tuple[str, int] | None = None
        self._answer: str | Passed | None = None
        self._changed = anyio.Event()

    # -- what people do --------------------------------------------------------------------

    def check_holder(self, member_id: str, holder: str | None) -> None:
        """Refuse ``holder`` speaking for a person present under another identity."""
        held = self.holders.get(member_id)
        if holder is not None and member_id in self.present and held not in (None, holder):
            raise RoomConflict(
                f"{member_id!r} is in the room under another identity: join under another name"
            )

    def arrive(self, member_id: str, holder: str | None = None) -> bool:
        """Mark ``member_id`` present (held by ``holder``); True if they were not."""
        self.check_holder(member_id, holder)
        if member_id in self.present:
            return False
        self.present.add(member_id)
        self.holders[member_id] = holder
        self._wake()
        return True

    def depart(self, member_id: str) -> bool:
        """Mark ``member_id`` away (their queued words are dropped); True if they were here."""
        self._queued.pop(member_id, None)
        self.holders.pop(member_id, None)
        if member_id not in self.present:
            return False
        self.present.discard(member_id)
        self._wake()
        return True

    def offer(self, member_id: str, text: str, *, interject: bool) -> Literal["turn", "queued"]:
        """Hand over ``text``: the answer to their turn, or an interjection to record next."""
        if self._awaited is not None and self._awaited[0] == member_id and self._answer is None:
            self._answer = text
            self._wake()
            return "turn"
        if not interject:
            raise RoomConflict("it is not your turn, and this room takes no interjections")
        if member_id in self._queued:
            raise RoomConflict(
                "your previous message is still waiting for the turn in flight to end"
            )
        self._queued[member_id] = text
        self._wake()
        return "queued"

    def pass_turn(self, member_id: str) -> None:
        """End ``member_id``'s turn with nothing said; :class:`RoomConflict` if it is not theirs."""
        if self._awaited is None or self._awaited[0] != member_id or self._answer is not None:
            raise RoomConflict("it is not your turn: there is nothing to pass")
        self._answer = PASSED
        self._wake()

    # -- what the engine does --------------------------------------------------------------

    def awaiting(self) -> tuple[str, int] | None:
        """Whose turn (and which) the engine is waiting on, if a person's."""
        return self._awaited

    def take_queued(self) -> list[tuple[str, str]]:
        """The interjections waiting, oldest first; the queue is emptied."""
        queued = list(self._queued.items())
        self._queued.clear()
        return queued

    async def wait_for(self, member_id: str, turn: int) -> str | Passed | None:
        """``member_id``'s answer for ``turn`` (:data:`PASSED` if they pass it); None if they
        leave first (cancel for deadlines)."""
        self._awaited, self._answer = (member_id, turn), None
        try:
            while (answer := self._given()) is None:
                if member_id not in self.present:
                    return None
                await self.wait_changed()
            return answer
        finally:
            self._awaited, self._answer = None, None

    def _given(self) -> str | Passed | None:
        return self._answer

    async def wait_changed(self) -> None:
        """Until someone arrives, leaves or speaks."""
        await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


# -- who may sit where -----------------------------------------------------------------------


def check_join(room: Room, holder: str | None, by: str | None) -> None:
    """Refuse a joiner the room's ``people.join`` does not admit (:class:`~mesh.Forbidden`).

    ``holder`` is the joiner's identity (None: an admin or the embedding program,
    who always may), ``by`` its token's name; the owner always may.
    """
    policy = room.people.join
    if holder is None or holder == room.owner or policy == "clients":
        return
    if isinstance(policy, tuple) and by is not None and by in policy:
        return
    allowed = "its owner" if policy == "owner" else f"its owner and the tokens {list(policy)}"
    raise Forbidden(
        f"room {room.id!r} admits {allowed} (people.join); token {by!r} may not join it"
    )


def check_seat(room_id: str, member_id: str, held: str | None, holder: str | None) -> None:
    """Refuse ``holder`` acting as a person whose seat ``held`` another identity took."""
    # In a cluster, a holder forwarded from another daemon is qualified by it (token:ID@A);
    # a token is valid on one daemon only, so its id names it either way.
    if holder is not None and held is not None and _token(held) != _token(holder):
        raise Forbidden(
            f"the seat of {member_id!r} in room {room_id!r} is held by another token "
            "(the one that first took it): join under another name"
        )


def _token(holder: str) -> str:
    return holder.split("@", 1)[0]


def check_lookalike(room: Room, seat_id: str, name: str) -> None:
    """Refuse a new name that passes for a member's (``Cаrol`` beside ``Carol``)."""
    mine = {skeleton(name), skeleton(seat_id)} - {""}  # all punctuation looks like nothing
    for member in room.members:
        if member.id != seat_id and mine & {skeleton(member.name), skeleton(member.id)}:
            raise RoomConflict(
                f"the name {name!r} looks like {member.name!r}, a member of room {room.id!r}: "
                "choose one that does not",
                room=room.id,
            )
