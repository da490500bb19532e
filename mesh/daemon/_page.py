"""The room page: static files shipped in the package, and the routes people use in rooms.

``GET /`` serves ``static/index.html``; ``GET /static/{name}`` its script, style
and icon. Both are public routes of the route table, like ``GET /health``: the
page is plain HTML, CSS and JavaScript (no build step, nothing fetched from
elsewhere) that signs in with a token, watches ``/agents/events`` and
``/rooms/{id}/events`` and drives the room API, so it carries no data itself:
every request it makes carries the token. Its Content-Security-Policy allows
scripts and styles from the daemon alone, so text from an agent can never become
markup that runs.

The people routes (see :mod:`mesh.rooms._people`):

==================================  ============================================
``POST /rooms/{id}/join``           ``{"name": "Carol"}``: a seat, or yours again
``POST /rooms/{id}/leave``          ``{"member": "carol"}``
``POST /rooms/{id}/say``            ``{"member": "carol", "text": "..."}``: 200 when
                                    it answers your turn, 202 when it waits for
                                    the turn in flight (an interjection);
                                    ``{"member": "carol", "pass": true}`` passes
                                    your turn (200; 409 when it is not yours)
``POST /rooms/{id}/answer``         ``{"member": "carol", "question": "q3-1",
                                    "action": "accept", "content": {...}}``: the
                                    answer to a member's question (``decline`` and
                                    ``cancel`` carry no content); 409 for a question
                                    not open or a person not present, 400 for an
                                    answer that does not fit the question
==================================  ============================================

They need the ``rooms`` right (client and admin tokens), and the room's
``people.join`` must admit the token (its owner's choice: the owner alone by
default; admins always). A person's words reach every agent of the room, so
the token must also be allowed to call each of them (the orchestrator's door).
A person's seat is held for good by the token that first took it (recorded
with the room): no other token may join, speak or leave as them (403).
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Final

import msgspec

from mesh._errors import Forbidden
from mesh.daemon._auth import Identity
from mesh.daemon._routes import HttpHandler, Params, read_body
from mesh.rooms import InvalidRoomSpec, RoomConflict, RoomError, RoomManager, RoomNotFound
from transports import HttpRequest, HttpResponse

__all__ = ["PAGE_HEADERS", "PageFiles", "PeopleRoutes"]

#: What each shipped file is served as.
_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
#: Scripts, styles and images from the daemon only; sockets back to it; no framing.
PAGE_HEADERS: Final = (
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-cache"),
)

_JSON: Final = msgspec.json.Encoder()


class PageFiles:
    """The page's files, read once from the package (a fixed set: no path reaches the disk)."""

    def __init__(self) -> None:
        folder = resources.files("mesh.daemon") / "static"
        self._files: dict[str, tuple[bytes, str]] = {}
        for entry in folder.iterdir():
            suffix = "." + entry.name.rsplit(".", 1)[-1]
            if entry.is_file() and suffix in _TYPES:
                self._files[entry.name] = (entry.read_bytes(), _TYPES[suffix])

    def names(self) -> list[str]:
        return sorted(self._files)

    def get(self, name: str) -> HttpResponse:
        """``name`` (``""`` for the page itself), or a 404 that says so."""
        found = self._files.get(name or "index.html")
        if found is None:
            return HttpResponse.error(404, f"no page file {name!r}")
        body, content_type = found
        return HttpResponse(200, body, content_type=content_type, headers=PAGE_HEADERS)

    def http_handlers(self) -> dict[str, HttpHandler]:
        return {"page": self.handle_page, "page_file": self.handle_file}

    async def handle_page(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        return self.get("")

    async def handle_file(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        return self.get(p["name"])


class JoinBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str


class LeaveBody(msgspec.Struct, forbid_unknown_fields=True):
    member: str


class SayBody(msgspec.Struct, forbid_unknown_fields=True):
    member: str
    text: str = ""
    passing: bool = msgspec.field(default=False, name="pass")


class AnswerBody(msgspec.Struct, forbid_unknown_fields=True):
    member: str
    question: str
    action: str
    content: dict[str, Any] | None = None


def _status(exc: RoomError) -> int:
    if isinstance(exc, RoomNotFound):
        return 404
    if isinstance(exc, RoomConflict):
        return 409
    return 400 if isinstance(exc, InvalidRoomSpec) else 500


class PeopleRoutes:
    """``POST /rooms/{id}/join|leave|say``: people taking part in a room.

    A seat is held for good by the identity (token) that first took it, an admin's
    included: only that identity (or an admin, acting for anyone) may join, speak,
    pass or leave as that person, present or away.
    """

    def __init__(self, rooms: RoomManager) -> None:
        self._rooms = rooms

    def http_handlers(self) -> dict[str, HttpHandler]:
        return {
            "join_room": self.handle_join,
            "leave_room": self.handle_leave,
            "say_in_room": self.handle_say,
            "answer_in_room": self.handle_answer,
        }

    async def handle_join(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        return await self._act("join", request, who, p["id"])

    async def handle_leave(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        return await self._act("leave", request, who, p["id"])

    async def handle_say(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        return await self._act("say", request, who, p["id"])

    async def handle_answer(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        """A person's answer to a member's question (the room records it)."""
        try:
            given = read_body(request, AnswerBody, "answer body")
            answered = await self._rooms.answer(
                p["id"],
                given.member,
                given.question,
                given.action,
                given.content,
                holder=who.owner,
                person=who.principal,
            )
        except RoomError as exc:
            return HttpResponse.error(_status(exc), str(exc))
        except Forbidden as exc:  # a seat another token holds
            return HttpResponse.error(403, str(exc), code=exc.code)
        return HttpResponse.json(200, answered)

    async def _act(
        self, action: str, request: HttpRequest, who: Identity, room_id: str
    ) -> HttpResponse:
        holder, person = who.owner, who.principal  # admins hold their seats too
        rooms = self._rooms
        try:
            if action == "join":
                joined = read_body(request, JoinBody, f"{action} body")
                member = await rooms.join(room_id, joined.name, holder=holder, person=person)
                return HttpResponse.json(200, {"member": member})
            if action == "leave":
                leaving = read_body(request, LeaveBody, f"{action} body")
                await rooms.leave(room_id, leaving.member, holder=holder, person=person)
                return HttpResponse(204)
            said = read_body(request, SayBody, f"{action} body")
            if said.passing:
                if said.text:
                    return HttpResponse.error(400, "a pass says nothing: send text or pass")
                await rooms.pass_turn(room_id, said.member, holder=holder, person=person)
                return HttpResponse.json(200, {"status": "passed", "member": said.member})
            outcome = await rooms.say(room_id, said.member, said.text, holder=holder, person=person)
            return HttpResponse.json(200 if outcome["status"] == "turn" else 202, outcome)
        except RoomError as exc:
            return HttpResponse.error(_status(exc), str(exc))
        except Forbidden as exc:  # people.join, a seat another token holds, or the door
            return HttpResponse.error(403, str(exc), code=exc.code)
