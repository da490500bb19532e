"""What the room API raises, as part of the mesh's one exception tree.

::

    MeshError
    └── RoomError                  anything about rooms
        ├── RoomNotFound           no room with that id            (HTTP 404)
        ├── RoomConflict           not in a state that allows it   (HTTP 409)
        ├── InvalidRoomSpec        the spec or a member is unusable (HTTP 400)
        └── ObserverTooSlow        an observer fell too far behind; re-subscribe
                                   with ``since=`` the last seq it saw
"""

from __future__ import annotations

import msgspec

from mesh._errors import ErrorCode, MeshError

__all__ = [
    "InvalidRoomSpec",
    "ObserverTooSlow",
    "RoomConflict",
    "RoomError",
    "RoomNotFound",
    "invalid_spec",
]


class RoomError(MeshError):
    """Base of the room errors; ``room`` is the room's id when there is one."""

    def __init__(self, message: str, *, room: str | None = None, agent: str | None = None) -> None:
        self.room = room
        super().__init__(message, agent=agent)


class RoomNotFound(RoomError):
    default_code = ErrorCode.INVALID_PARAMS

    def __init__(self, room: str) -> None:
        super().__init__(f"no room {room!r}", room=room)


class RoomConflict(RoomError):
    """Pausing a stopped room, resuming a finished one, creating an id that exists."""

    default_code = ErrorCode.INVALID_REQUEST


class InvalidRoomSpec(RoomError):
    default_code = ErrorCode.INVALID_PARAMS


class ObserverTooSlow(RoomError):
    def __init__(self, room: str, max_buffer: int) -> None:
        super().__init__(
            f"observer of room {room!r} fell {max_buffer} events behind and was dropped; "
            "subscribe again with since= the last seq it saw",
            room=room,
        )


def invalid_spec(exc: msgspec.MsgspecError | ValueError) -> InvalidRoomSpec:
    """A spec that failed to decode or validate, as the room error the API reports."""
    return InvalidRoomSpec(f"invalid room spec: {exc}")
