"""Accepting TCP connections: every connection waiting per wake-up, not one per checkpoint.

anyio's ``Listener.serve`` accepts one connection per pass of its loop: on asyncio
each ``accept`` is a checkpoint (a pass of the event loop), a cancel scope, and a
``sock_accept`` that registers the listening socket with the selector when nothing
waits and unregisters it once a connection came (two ``epoll_ctl`` per connection
when the server keeps up). asyncio's own server keeps its listening socket
registered and accepts a burst in one callback. :func:`serve_listener` does the
same under anyio: on asyncio the socket stays registered while the server accepts,
each wake-up accepts what the backlog holds (up to :data:`BURST`), and each
connection's transport is made in the connection's own task, as anyio's ``accept``
makes it; on trio one wait for readability precedes each burst, where trio's
``accept`` is a checkpoint and a pass of the scheduler per connection. Anything
else (TLS, another kind of listener) is served by anyio's loop.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from typing import Any, Final

import anyio
import anyio.abc
import sniffio

from transports._sockets import lazy_stream_protocol

__all__ = ["BURST", "serve_listener"]

#: Connections accepted per wake-up at most; past it the loop runs other work before it
#: accepts more. Each accepted connection's handshake runs in the same turns of the loop,
#: so a burst holds the links already up for about that many handshakes: asyncio's own
#: server takes its whole backlog (100) and a storm of 100 refused dials then stalled a
#: good link for the storm's length (tests/faults/test_tokens.py); 16 still takes a
#: crowd of 1,000 in a few dozen wake-ups.
BURST: Final = 16

Handler = Callable[[anyio.abc.SocketStream], Coroutine[Any, Any, object]]
#: How one listening socket is served: its socket, the handler, the connections' group.
Bursts = Callable[[socket.socket, Handler, anyio.abc.TaskGroup], Coroutine[Any, Any, None]]


async def serve_listener(
    listener: anyio.abc.Listener[Any], handler: Handler, task_group: anyio.abc.TaskGroup
) -> None:
    """Accept connections on ``listener`` for ever, each served by ``handler`` in a task
    of ``task_group``; cancel to stop (the listening socket is left to close)."""
    found = _asyncio_listening(listener) or _trio_listening(listener)
    if found is None:
        await listener.serve(handler, task_group=task_group)
        return
    accept_bursts, sockets = found
    if len(sockets) == 1:
        await accept_bursts(sockets[0], handler, task_group)
        return
    async with anyio.create_task_group() as each:
        for sock in sockets:
            each.start_soon(accept_bursts, sock, handler, task_group)


def _listening_sockets(
    listener: anyio.abc.Listener[Any], listener_type: type
) -> list[socket.socket] | None:
    """``listener``'s listening sockets if each is a plain ``listener_type``."""
    listeners = getattr(listener, "listeners", [listener])
    if not listeners or not all(type(each) is listener_type for each in listeners):
        return None
    sockets = [each.extra(anyio.abc.SocketAttribute.raw_socket) for each in listeners]
    return None if any(sock.getblocking() for sock in sockets) else sockets


def _asyncio_listening(
    listener: anyio.abc.Listener[Any],
) -> tuple[Bursts, list[socket.socket]] | None:
    """How to accept on ``listener``'s sockets if it is anyio's plain TCP on asyncio."""
    found = _plain_tcp(listener, "asyncio")
    if found is None:
        return None
    backend, sockets = found
    # Its state made on first use: a link's I/O is taken over at once (transports._sockets).
    stream_types = (backend.SocketStream, lazy_stream_protocol(backend.StreamProtocol))
    return partial(_asyncio_bursts, stream_types=stream_types), sockets


def _plain_tcp(
    listener: anyio.abc.Listener[Any], library: str
) -> tuple[Any, list[socket.socket]] | None:
    """anyio's backend module for ``library`` and ``listener``'s sockets, if ``library``
    runs this loop and each of them is that backend's plain TCP listener (private to
    anyio, so probed), else None: anyio's own loop serves then."""
    if sniffio.current_async_library() != library:
        return None
    try:
        backend = importlib.import_module(f"anyio._backends._{library}")
        listener_type = backend.TCPSocketListener
    except (ImportError, AttributeError):  # pragma: no cover - anyio<5 is pinned
        return None
    sockets = _listening_sockets(listener, listener_type)
    return None if sockets is None else (backend, sockets)


async def _asyncio_bursts(
    sock: socket.socket,
    handler: Handler,
    task_group: anyio.abc.TaskGroup,
    *,
    stream_types: tuple[type, type],
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


def _trio_listening(listener: anyio.abc.Listener[Any]) -> tuple[Bursts, list[socket.socket]] | None:
    """How to accept on ``listener``'s sockets if it is anyio's plain TCP on trio."""
    found = _plain_tcp(listener, "trio")
    if found is None:
        return None
    backend, sockets = found
    return partial(_trio_bursts, stream_type=backend.SocketStream), sockets


async def _trio_bursts(
    sock: socket.socket, handler: Handler, task_group: anyio.abc.TaskGroup, *, stream_type: type
) -> None:
    """trio's accept is a checkpoint and a scheduling pass per connection (anyio's a
    guard around it): here one wait for readability per burst, and plain accepts."""
    import trio

    while True:
        try:
            await trio.lowlevel.wait_readable(sock)
        except trio.ClosedResourceError:
            raise anyio.ClosedResourceError from None  # as anyio's accept says it
        for client in _waiting(sock):
            task_group.start_soon(handler, stream_type(trio.socket.from_stdlib_socket(client)))


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
        # Not made non-blocking here: asyncio's transport and trio's socket both do it
        # as they take the socket (a syscall per connection, made once, not twice).
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
