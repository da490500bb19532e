"""The daemon's room routes and the WebSocket observers of a room's events.

``POST /rooms`` creates (and starts) a room; ``GET /rooms`` and ``GET /rooms/{id}``
(with its transcript) read them; ``POST /rooms/{id}/pause|resume|stop`` steer
them; ``/rooms/{id}/events`` is a WebSocket that sends every event of the room,
in order, from ``?since=SEQ`` on, then live until the room stops.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
import structlog

from mesh.rooms import (
    InvalidRoomSpec,
    RoomConflict,
    RoomError,
    RoomManager,
    RoomNotFound,
    decode_room_spec,
    encode_event,
)
from transports import CloseCode, HttpRequest, HttpResponse, TransportClosed, WebSocketStream

__all__ = ["RoomRoutes", "observer_room_id"]

log = structlog.get_logger("mesh.daemon")

_JSON: Final = msgspec.json.Encoder()


def _json(status: int, payload: Any) -> HttpResponse:
    return HttpResponse(status, _JSON.encode(payload))


def _error(status: int, message: str) -> HttpResponse:
    return _json(status, {"error": {"status": status, "message": message}})


def _status(exc: RoomError) -> int:
    if isinstance(exc, RoomNotFound):
        return 404
    if isinstance(exc, RoomConflict):
        return 409
    if isinstance(exc, InvalidRoomSpec):
        return 400
    return 500


def observer_room_id(path: str) -> str | None:
    """``/rooms/{id}/events`` → ``id``; anything else → None."""
    parts = [p for p in path.split("/") if p]
    if len(parts) == 3 and parts[0] == "rooms" and parts[2] == "events":
        return parts[1]
    return None


class RoomRoutes:
    def __init__(self, rooms: RoomManager) -> None:
        self._rooms = rooms

    async def handle(self, request: HttpRequest, parts: list[str]) -> HttpResponse:
        try:
            return await self._route(request, parts)
        except RoomError as exc:
            return _error(_status(exc), str(exc))

    async def _route(self, request: HttpRequest, parts: list[str]) -> HttpResponse:
        rooms = self._rooms
        match (request.method, *parts):
            case ("POST", "rooms"):
                spec = decode_room_spec(request.body)
                return _json(201, await rooms.create(spec))
            case ("GET", "rooms"):
                return _json(200, {"rooms": await rooms.list()})
            case ("GET", "rooms", room_id):
                snapshot = await rooms.get(room_id)
                return _json(200, {"room": snapshot, "transcript": await rooms.transcript(room_id)})
            case ("GET", "rooms", room_id, "events"):
                since = int(request.query_value("since") or 0)
                return _json(200, {"events": await rooms.events(room_id, since=since)})
            case ("POST", "rooms", room_id, "pause"):
                return _json(200, await rooms.pause(room_id))
            case ("POST", "rooms", room_id, "resume"):
                return _json(200, await rooms.resume(room_id))
            case ("POST", "rooms", room_id, "stop"):
                return _json(200, await rooms.stop(room_id))
        return _error(
            405 if parts[:1] == ["rooms"] else 404, f"no route {request.method} {request.path}"
        )

    async def observe(
        self, stream: WebSocketStream, room_id: str, since: int, *, deltas: bool = False
    ) -> None:
        """Send the room's events to one observer, in order, until the room stops.

        With ``deltas`` (``?deltas=1``) the pieces of replies being written too.
        """
        watch = self._rooms.subscribe_live if deltas else self._rooms.subscribe
        try:
            async with watch(room_id, since=since) as events:
                async for event in events:
                    await stream.send(encode_event(event))
        except RoomNotFound as exc:
            await stream.aclose(CloseCode.NOT_FOUND, str(exc)[:120])
        except TransportClosed:
            log.debug("rooms.observer_left", room=room_id)
