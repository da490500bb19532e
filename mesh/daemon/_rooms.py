"""The daemon's room routes and the WebSocket observers of a room's events.

``POST /rooms`` creates (and starts) a room owned by the caller's token; ``GET
/rooms`` and ``GET /rooms/{id}`` (with its transcript) read them; ``POST
/rooms/{id}/pause|resume|stop`` steer them and ``DELETE /rooms/{id}`` removes a
stopped one (owner or admin only); ``/rooms/{id}/events`` is a WebSocket that
sends every event of the room, in order, from ``?since=SEQ`` on, then live
until the room stops (``GET`` it for the events so far as JSON, or with
``?format=md`` as the Markdown transcript the CLI exports). Creation is
bounded: topic length, members, turns, and how many rooms may be active at
once, in all and per owner, with slots kept for admins and for tokens that hold
no room yet, so a few clients filling their shares lock no one else out
(resuming a stopped room is bounded the same way).
A room's turns are made on behalf of its creator's token, so creating one with
an agent that token may not call is refused at once (403, naming the agent and
the rule).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

from mesh._errors import Forbidden
from mesh._input import whole_number
from mesh._logging import get_logger
from mesh.daemon._auth import Identity
from mesh.daemon._routes import HttpHandler, Params
from mesh.daemon._settings import DaemonSettings
from mesh.daemon._streams import serve_watcher
from mesh.rooms import (
    InvalidRoomSpec,
    ObserverTooSlow,
    RoomConflict,
    RoomError,
    RoomManager,
    RoomNotFound,
    RoomSnapshot,
    RoomSpec,
    RoomStatus,
    decode_room_spec,
    encode_event,
    transcript_markdown,
)
from transports import CloseCode, HttpRequest, HttpResponse, WebSocketStream

__all__ = ["RoomRoutes", "parse_since"]

log = get_logger("mesh.daemon")


def _status(exc: RoomError) -> int:
    if isinstance(exc, RoomNotFound):
        return 404
    if isinstance(exc, RoomConflict):
        return 409
    if isinstance(exc, InvalidRoomSpec):
        return 400
    return 500


def parse_since(value: str | None) -> int | None:
    """``?since=SEQ``: absent is 0; anything but a whole number >= 0 is None."""
    if value is None or value == "":
        return 0
    return whole_number(value)


#: Rooms one page of ``GET /rooms`` holds by default (``?limit=``), and at most.
ROOMS_PAGE: Final = 100
MAX_ROOMS_PAGE: Final = 1000
#: A room id in a cursor is at most this long (ids are far shorter).
_CURSOR_ID: Final = 256


def rooms_cursor(snapshot: RoomSnapshot) -> str:
    """Where the next page of a listing starts: after this room (``?before=``)."""
    return f"{snapshot.room.created_at}:{snapshot.id}"


def parse_cursor(value: str) -> tuple[int, str] | None:
    """A ``next`` cursor back as (created_at, id); None if it is not one."""
    made, _, room_id = value.partition(":")
    created_at = whole_number(made)
    if created_at is None or not room_id or len(room_id) > _CURSOR_ID:
        return None
    return created_at, room_id


RoomHandler = Callable[[HttpRequest, Identity, Params], Awaitable[HttpResponse]]


def _room_errors(handler: RoomHandler) -> HttpHandler:
    async def handle(request: HttpRequest, who: Identity, params: Params) -> HttpResponse:
        try:
            return await handler(request, who, params)
        except RoomError as exc:
            return HttpResponse.error(_status(exc), str(exc))
        except Forbidden as exc:  # the door refused a member on behalf of this token
            return HttpResponse.error(403, str(exc), code=exc.code, data=exc.data)

    return handle


class RoomRoutes:
    def __init__(self, rooms: RoomManager, settings: DaemonSettings) -> None:
        self._rooms = rooms
        self._settings = settings
        #: Rooms being made or resumed, by owner: each holds its slot from the check to
        #: the moment the room counts itself (its introductions come between).
        self._claimed: Counter[str | None] = Counter()

    def http_handlers(self) -> dict[str, HttpHandler]:
        handlers: dict[str, RoomHandler] = {
            "create_room": self.handle_create,
            "rooms": self.handle_list,
            "room": self.handle_show,
            "room_events": self.handle_events,
            "pause_room": self.handle_pause,
            "resume_room": self.handle_resume,
            "stop_room": self.handle_stop,
            "delete_room": self.handle_delete,
        }
        return {name: _room_errors(handler) for name, handler in handlers.items()}

    # -- creating -----------------------------------------------------------------------

    async def handle_create(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        spec = decode_room_spec(request.body)
        refused = self._bounds(spec)
        if refused is not None:
            return refused
        owner = self._rooms.owner_key(who.owner)  # in a cluster, qualified by this daemon
        async with self._slot(owner) as claimed:
            refused = await self._room_slots(owner, who.admin, claimed, creating=True)
            if refused is not None:
                return refused
            created = await self._rooms.create(spec, owner=who.owner, creator=who.principal)
        return HttpResponse.json(201, created)

    @asynccontextmanager
    async def _slot(self, owner: str | None) -> AsyncIterator[tuple[int, int]]:
        """Claim a slot for ``owner`` until the block ends; yields the slots others have
        claimed and not yet filled: ``(in all, of owner)``."""
        claimed = self._claimed
        others = (claimed.total(), claimed[owner])
        claimed[owner] += 1
        try:
            yield others
        finally:
            claimed[owner] -= 1
            if not claimed[owner]:
                del claimed[owner]

    async def _room_slots(
        self,
        owner: str | None,
        admin: bool,
        claimed: tuple[int, int] = (0, 0),
        *,
        creating: bool = False,
    ) -> HttpResponse | None:
        """The 429 when no room slot is free for ``owner``: in all (admins have
        ``admin_rooms`` more), for a token that holds rooms already (the last
        ``newcomer_rooms`` are kept for tokens that hold none), for ``owner`` alone,
        and when ``creating``, when ``owner`` keeps as many rooms as it may.

        ``claimed`` counts the rooms still being made (in all, of ``owner``): they have
        passed this check and do not count themselves yet.
        """
        active = await self._rooms.active_count() + claimed[0]
        if admin:
            return self._admin_slot(active)
        refused = self._free_slot(active)
        if refused is not None:
            return refused
        kept, active_mine = await self._rooms.owned(owner) if owner else (0, 0)
        mine = claimed[1] + active_mine
        refused = self._own_slot(mine) or self._newcomer_slot(active, mine)
        if refused is not None:
            return refused
        most = self._settings.max_rooms_kept_per_identity
        if creating and kept + claimed[1] >= most:
            return HttpResponse.error(
                429,
                f"this token keeps {kept} rooms, finished ones included, its limit "
                f"(max_rooms_kept_per_identity = {most}); delete finished ones first",
                limit="max_rooms_kept_per_identity",
            )
        return None

    def _free_slot(self, active: int) -> HttpResponse | None:
        limit = self._settings.max_active_rooms
        if active < limit:
            return None
        return HttpResponse.error(
            429,
            f"{active} rooms are running or paused, the limit (max_active_rooms = {limit}); "
            "stop one first",
            limit="max_active_rooms",
        )

    def _admin_slot(self, active: int) -> HttpResponse | None:
        """Admins may also take the ``admin_rooms`` no one else may."""
        settings = self._settings
        limit = settings.max_active_rooms + settings.admin_rooms
        if active < limit:
            return None
        return HttpResponse.error(
            429,
            f"{active} rooms are running or paused, the limit for admins (max_active_rooms = "
            f"{settings.max_active_rooms} + admin_rooms = {settings.admin_rooms}); "
            "stop one first",
            limit="admin_rooms",
        )

    def _newcomer_slot(self, active: int, mine: int) -> HttpResponse | None:
        """A token holding a room already may not take the last ``newcomer_rooms`` slots:
        they are kept so that that many tokens holding none still get one."""
        settings = self._settings
        kept = settings.newcomer_rooms
        if mine == 0 or active < settings.max_active_rooms - kept:
            return None
        return HttpResponse.error(
            429,
            f"{active} of max_active_rooms = {settings.max_active_rooms} rooms are running or "
            f"paused and the last {kept} are kept for tokens that hold none (newcomer_rooms "
            f"= {kept}); this token holds {mine}: stop one first",
            limit="newcomer_rooms",
        )

    def _own_slot(self, mine: int) -> HttpResponse | None:
        per = self._settings.max_rooms_per_identity
        if mine < per:
            return None
        return HttpResponse.error(
            429,
            f"this token's {mine} rooms are running or paused, its limit "
            f"(max_rooms_per_identity = {per}); stop one first",
            limit="max_rooms_per_identity",
        )

    def _bounds(self, spec: RoomSpec) -> HttpResponse | None:
        settings = self._settings
        if len(spec.topic) > settings.max_topic_length:
            return HttpResponse.error(
                413,
                f"topic of {len(spec.topic)} characters exceeds the limit of "
                f"{settings.max_topic_length} (max_topic_length)",
                limit="max_topic_length",
            )
        if len(spec.members) > settings.max_room_members:
            return HttpResponse.error(
                400,
                f"{len(spec.members)} members exceed the limit of {settings.max_room_members} "
                "(max_room_members)",
                limit="max_room_members",
            )
        limits = spec.limits
        for name, value in (
            ("max_turns", limits.max_turns),
            ("max_messages_per_agent", limits.max_messages_per_agent),
        ):
            if value is not None and value > settings.max_room_turns:
                return HttpResponse.error(
                    400,
                    f"limits.{name} = {value} exceeds the limit of {settings.max_room_turns} "
                    "(max_room_turns)",
                    limit="max_room_turns",
                )
        return None

    # -- reading ------------------------------------------------------------------------

    async def handle_list(self, request: HttpRequest, who: Identity, _: Params) -> HttpResponse:
        """The newest rooms first, a page at a time: ``?limit=`` (1 to 1000, 100 by default)
        and ``?before=`` the last page's ``next``, which is null on the last page."""
        limit = whole_number(request.query_value("limit") or str(ROOMS_PAGE), digits=4)
        if limit is None or not 1 <= limit <= MAX_ROOMS_PAGE:
            return HttpResponse.error(
                400, f"limit must be a whole number from 1 to {MAX_ROOMS_PAGE}"
            )
        before = None
        if (cursor := request.query_value("before")) is not None:
            before = parse_cursor(cursor)
            if before is None:
                return HttpResponse.error(400, "before must be a listing's next cursor")
        rooms = await self._rooms.newest(limit + 1, before=before)
        after = rooms_cursor(rooms[limit - 1]) if len(rooms) > limit else None
        return HttpResponse.json(200, {"rooms": rooms[:limit], "next": after})

    async def handle_show(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        snapshot = await self._rooms.get(p["id"])
        transcript = await self._rooms.transcript(p["id"])
        return HttpResponse.json(200, {"room": snapshot, "transcript": transcript})

    async def handle_events(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        since = parse_since(request.query_value("since"))
        if since is None:
            return HttpResponse.error(400, "since must be a sequence number (an integer >= 0)")
        events = await self._rooms.events(p["id"], since=since)
        shape = request.query_value("format") or "json"
        if shape == "md":  # the CLI's `mesh room export --format md`, for the page's button
            snapshot = await self._rooms.get(p["id"])
            text = transcript_markdown(snapshot, events).encode()
            return HttpResponse(200, text, content_type="text/markdown; charset=utf-8")
        if shape != "json":
            return HttpResponse.error(400, f"format must be json or md, not {shape[:20]!r}")
        return HttpResponse.json(200, {"events": events})

    async def observe(self, stream: WebSocketStream, who: Identity, p: Params) -> None:
        """Send the room's events to one observer, in order, until the room stops.

        With ``?deltas=1`` the pieces of replies being written too.
        """
        room_id = p["id"]
        target = HttpRequest("GET", stream.request_target, ())
        since = parse_since(target.query_value("since"))
        if since is None:
            await stream.aclose(CloseCode.INVALID_DATA, "since must be an integer >= 0")
            return
        # ?deltas=1: the pieces of replies being written too (the page asks for them).
        deltas = target.query_value("deltas") in ("1", "true")
        await serve_watcher(stream, lambda: self._send_events(stream, room_id, since, deltas))

    async def _send_events(
        self, stream: WebSocketStream, room_id: str, since: int, deltas: bool
    ) -> None:
        watch = self._rooms.subscribe_live if deltas else self._rooms.subscribe
        try:
            async with watch(room_id, since=since) as events:
                async for event in events:
                    await stream.send(encode_event(event))
        except RoomNotFound as exc:
            await stream.aclose(CloseCode.NOT_FOUND, str(exc)[:120])
        except ObserverTooSlow:
            # Every event is durable: the observer reconnects with ?since= its last seq.
            await stream.aclose(CloseCode.FELL_BEHIND, "fell behind; reconnect with ?since=SEQ")

    # -- steering (owner or admin) -----------------------------------------------------

    async def _owned(self, room_id: str, who: Identity) -> RoomSnapshot | HttpResponse:
        snapshot = await self._rooms.get(room_id)
        if not (who.admin or self._rooms.owned_by(snapshot.room, who.owner)):
            return HttpResponse.error(
                403,
                f"room {room_id!r} belongs to another identity; only its owner or an admin "
                "may change it",
                missing="ownership",
            )
        return snapshot

    async def _steer(
        self, room_id: str, who: Identity, action: Callable[..., Awaitable[Any]]
    ) -> HttpResponse:
        owned = await self._owned(room_id, who)
        if isinstance(owned, HttpResponse):
            return owned
        # Who asks goes along: where another daemon runs the room, it checks them again.
        return HttpResponse.json(200, await action(room_id, by=who.owner, person=who.principal))

    async def handle_pause(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        return await self._steer(p["id"], who, self._rooms.pause)

    async def handle_resume(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        owned = await self._owned(p["id"], who)
        if isinstance(owned, HttpResponse):
            return owned
        by, person = who.owner, who.principal
        if owned.status is not RoomStatus.STOPPED:
            return HttpResponse.json(200, await self._rooms.resume(p["id"], by=by, person=person))
        async with self._slot(owned.room.owner) as claimed:  # running again: it takes a slot
            refused = await self._room_slots(owned.room.owner, who.admin, claimed)
            if refused is not None:
                return refused
            resumed = await self._rooms.resume(p["id"], by=by, person=person)
        return HttpResponse.json(200, resumed)

    async def handle_stop(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        return await self._steer(p["id"], who, self._rooms.stop)

    async def handle_delete(self, request: HttpRequest, who: Identity, p: Params) -> HttpResponse:
        owned = await self._owned(p["id"], who)
        if isinstance(owned, HttpResponse):
            return owned
        await self._rooms.delete(p["id"])
        return HttpResponse(204)
