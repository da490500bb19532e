"""The daemon's long-lived WebSocket streams to watchers: sent to, and read all along.

A watcher (``/agents/events``, ``/rooms/{id}/events``) sends nothing we act on,
but its socket must still be read: pongs, pings and the close handshake are
frames like any other, and an unread pong is a keepalive timeout (1011 after
``ping_timeout``) for a watcher that is perfectly alive. So every watcher is
served by :func:`serve_watcher`: one task produces what it is sent, another
reads (and drops) whatever arrives, and whichever ends first ends both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import structlog

from transports import FrameTooLarge, TransportClosed, WebSocketStream

__all__ = ["serve_watcher"]

log = structlog.get_logger("mesh.daemon")


async def serve_watcher(stream: WebSocketStream, produce: Callable[[], Awaitable[None]]) -> None:
    """Run ``produce()`` (which sends on ``stream``) while reading ``stream`` to its end.

    Returns when ``produce`` returns or when the watcher closes the stream,
    whichever comes first; ``TransportClosed`` from ``produce`` is the watcher
    leaving, not an error.
    """
    async with anyio.create_task_group() as tg:

        async def drain_incoming() -> None:
            await _read_until_closed(stream)
            tg.cancel_scope.cancel()  # the watcher left: stop producing for it

        tg.start_soon(drain_incoming)
        try:
            await produce()
        except TransportClosed:
            log.debug("daemon.watcher_left")
        tg.cancel_scope.cancel()


async def _read_until_closed(stream: WebSocketStream) -> None:
    while True:
        try:
            await stream.receive()  # processes control frames; data from a watcher is ignored
        except FrameTooLarge:
            continue
        except TransportClosed:
            return
