"""Following a room live from the command line: every event once, through drops and restarts.

The daemon's observer stream sends a room's events in ``seq`` order from
``?since=SEQ``. When the stream drops (the daemon restarted, the observer fell
behind, the network blinked) the follower dials again with ``since=`` the last
``seq`` it printed, with backoff, for up to :data:`RECONNECT_PATIENCE`; events
it has already printed are skipped by ``seq``, so each is printed exactly once.
"""

from __future__ import annotations

import signal
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

import anyio
import msgspec

from mesh._backoff import backoff
from mesh.rooms import Room, RoomEvent, StoppedEvent, StopReason, WelcomeEvent, decode_event
from transports import CloseCode, TransportClosed, open_websocket
from transports._groups import unwrap_single_error

__all__ = ["RECONNECT_PATIENCE", "Followed", "follow_room", "follow_until_interrupted"]

#: How long a dropped follower keeps redialling: a daemon restart takes seconds, and
#: a room may wait a minute for its members; past that, say so and let the user decide.
RECONNECT_PATIENCE: Final = 60.0
#: First redial within a quarter second on average; then doubling, up to 5 s apart.
_BACKOFF_BASE: Final = 0.5
_BACKOFF_CAP: Final = 5.0

Show = Callable[[RoomEvent, Room | None], None]


@dataclass(frozen=True, slots=True)
class Followed:
    """How following ended: the room's stop ``reason``, or None with ``detail`` saying why not."""

    reason: StopReason | None
    detail: str
    #: The daemon refused the token (4001/4003): revoked while following, or never valid.
    denied: bool = False


def events_url(http_url: str, room_id: str, since: int) -> str:
    base = "ws" + http_url.rstrip("/").removeprefix("http")
    return f"{base}/rooms/{quote(room_id, safe='')}/events?since={since}"


async def follow_room(
    http_url: str,
    room_id: str,
    show: Show,
    *,
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    since: int = 0,
    recorded: int = 0,
    through_pauses: bool = False,
) -> Followed:
    """Show each event of the room once, in order, until it stops; see the module docstring.

    Events up to ``since`` (a ``seq``) are skipped: 0 shows the room from its first.
    ``recorded`` is the room's last ``seq`` when following began: a stop before it is
    history (the room was paused, then resumed), so following goes on past it.
    ``through_pauses``: a pause is shown but does not end following (``watch --follow``).
    """
    last = since
    room: Room | None = None
    delays = backoff(base=_BACKOFF_BASE, cap=_BACKOFF_CAP)
    lost_at: float | None = None
    while True:
        try:
            url = events_url(http_url, room_id, last)
            async with open_websocket(url, token=token, ssl_context=ssl_context) as stream:
                lost_at, delays = None, backoff(base=_BACKOFF_BASE, cap=_BACKOFF_CAP)
                while True:
                    event = _decode(await stream.receive())
                    if event is None or event.seq <= last:
                        continue  # already shown before the drop
                    last = event.seq
                    if isinstance(event, WelcomeEvent):
                        room = event.room
                    show(event, room)
                    if isinstance(event, StoppedEvent) and _ends(event, recorded, through_pauses):
                        return Followed(event.reason, event.detail)
        except TransportClosed as closed:
            if closed.close_code == CloseCode.NOT_FOUND:
                return Followed(None, f"no room {room_id!r} to follow: {closed.reason}")
            if closed.close_code in (CloseCode.UNAUTHORIZED, CloseCode.FORBIDDEN):
                return Followed(None, f"the daemon refused the token: {closed.reason}", True)
            why = closed.reason
        now = anyio.current_time()
        lost_at = now if lost_at is None else lost_at
        if now - lost_at >= RECONNECT_PATIENCE:
            return Followed(None, f"lost the daemon for {RECONNECT_PATIENCE:g} s ({why})")
        await anyio.sleep(next(delays))  # backoff before redialling, not a wait for an event


def _ends(event: StoppedEvent, recorded: int, through_pauses: bool) -> bool:
    """Whether the stop ``event`` is where following ends: not history (before
    ``recorded``), and not a pause when following goes through pauses."""
    if event.seq < recorded:
        return False
    return not (through_pauses and event.reason is StopReason.PAUSED)


def _decode(frame: bytes) -> RoomEvent | None:
    try:
        return decode_event(frame)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        print(
            f"mesh: skipped an event the daemon sent that this version cannot read: {exc}",
            file=sys.stderr,
        )
        return None


async def follow_until_interrupted(
    http_url: str,
    room_id: str,
    show: Show,
    *,
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    since: int = 0,
    recorded: int = 0,
    through_pauses: bool = False,
) -> Followed | None:
    """:func:`follow_room`, or None once the user presses Ctrl-C (SIGINT)."""
    followed: Followed | None = None
    with unwrap_single_error():
        async with anyio.create_task_group() as tg:

            async def follow() -> None:
                nonlocal followed
                followed = await follow_room(
                    http_url,
                    room_id,
                    show,
                    token=token,
                    ssl_context=ssl_context,
                    since=since,
                    recorded=recorded,
                    through_pauses=through_pauses,
                )
                tg.cancel_scope.cancel()

            async def interrupted() -> None:
                with anyio.open_signal_receiver(signal.SIGINT) as signals:
                    async for _ in signals:
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(follow)
            tg.start_soon(interrupted)
    return followed
