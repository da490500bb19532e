"""Accepting TCP connections: every connection waiting per wake-up, not one per checkpoint.

anyio's ``Listener.serve`` accepts one connection per pass of its loop: on asyncio
each ``accept`` is a checkpoint (a pass of the event loop), a cancel scope, and a
``sock_accept`` that registers the listening socket with the selector when nothing
waits and unregisters it once a connection came (two ``epoll_ctl`` per connection
when the server keeps up). asyncio's own server keeps its listening socket
registered and accepts a burst in one callback. :func:`serve_listener` does the
same under anyio on asyncio: the socket stays registered while the server accepts,
each wake-up accepts what the backlog holds (up to :data:`BURST`), and each
connection's transport is made in the connection's own task, as anyio's ``accept``
makes it. Anything else (trio, TLS, another listener) is served by anyio's loop.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

import anyio
import anyio.abc
import sniffio

__all__ = ["BURST", "serve_listener"]

#: Connections accepted per wake-up at most (asyncio's own server takes its backlog,
#: 100 by default): past it the loop runs other work before it accepts more.
BURST: Final = 100

Handler = Callable[[anyio.abc.SocketStream], Awaitable[object]]


async def serve_listener(
    listener: anyio.abc.Listener[Any], handler: Handler, task_group: anyio.abc.TaskGroup
) -> None:
    """Accept connections on ``listener`` for ever, each served by ``handler`` in a task
    of ``task_group``; cancel to stop (the listening socket is left to close)."""
    found = _asyncio_listening(listener)
    if found is None:
        await listener.serve(handler, task_group=task_group)
        return
    stream_types, sockets = found
    if len(sockets) == 1:
        await _accept_bursts(sockets[0], stream_types, handler, task_group)
        return
    async with anyio.create_task_group() as each:
        for sock in sockets:
            each.start_soon(_accept_bursts, sock, stream_types, handler, task_group)


def _asyncio_listening(
    listener: anyio.abc.Listener[Any],
) -> tuple[tuple[type, type], list[socket.socket]] | None:
    """anyio-on-asyncio's stream classes and ``listener``'s listening sockets (private
    to anyio, so probed), or None when it is not plain TCP on asyncio."""
    if sniffio.current_async_library() != "asyncio":
        return None
    try:
        from anyio._backends._asyncio import SocketStream, StreamProtocol, TCPSocketListener
    except ImportError:  # pragma: no cover - anyio<5 is pinned; its own loop serves then
        return None
    listeners = getattr(listener, "listeners", [listener])
    if not listeners or not all(type(each) is TCPSocketListener for each in listeners):
        return None
    sockets = [each.extra(anyio.abc.SocketAttribute.raw_socket) for each in listeners]
    if any(sock.getblocking() for sock in sockets):
        return None
    return (SocketStream, StreamProtocol), sockets


async def _accept_bursts(
    sock: socket.socket,
    stream_types: tuple[type, type],
    handler: Handler,
    task_group: anyio.abc.TaskGroup,
) -> None:
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] | None = None

    def readable() -> None:
        if woken is not None and not woken.done():
            woken.set_result(None)

    loop.add_reader(sock, readable)
    try:
        while True:
            for client in _waiting(sock):
                task_group.start_soon(_serve_accepted, client, stream_types, handler)
            woken = loop.create_future()
            await woken
            woken = None
    finally:
        loop.remove_reader(sock)


def _waiting(sock: socket.socket) -> Iterator[socket.socket]:
    """The connections the backlog holds, up to :data:`BURST`. Errors other than a
    client gone before it was taken are raised, as anyio's ``accept`` raises them."""
    for _ in range(BURST):
        try:
            client, _ = sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionAbortedError:
            continue
        client.setblocking(False)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        yield client


async def _serve_accepted(
    client: socket.socket, stream_types: tuple[type, type], handler: Handler
) -> None:
    """The connection's transport made as anyio's ``accept`` makes it, then ``handler``."""
    stream_type, protocol_type = stream_types
    try:
        transport, protocol = await asyncio.get_running_loop().connect_accepted_socket(
            protocol_type, client
        )
    except OSError:  # gone before its transport was made: nothing to serve
        client.close()
        return
    await handler(stream_type(transport, protocol))
