"""Where the mesh meets transports, sockets, TLS and child processes: one translation.

:func:`map_transport_errors` wraps the opening of a link (the dial, the session's
start and the ``agent/info`` handshake) and turns whatever escapes into the mesh's
exception tree, chained with ``from``, as httpcore's ``map_exceptions`` turns each
network backend's errors into its own:

==========================================================  ================================
what escapes while opening                                  what the caller gets
==========================================================  ================================
WebSocket close 4001/4003, HTTP 401/403                     ``Unauthorized``
a transport's ``TransportClosed`` (``ConnectFailed`` too)   ``ConnectFailed``
``ConnectionLost`` (child exited, server unreachable)       ``ConnectFailed``
``ssl.SSLError`` (a certificate that does not verify)       ``ConnectFailed``, with the reason
``OSError`` (refused, unreachable, no such command)         ``ConnectFailed``
``TimeoutError``                                            ``CallTimeout``
any other ``MeshError``                                     itself
==========================================================  ================================

Every result carries the agent and transport (``str()`` names them) and keeps the
evidence there is: ``exit_code``, ``close_code``, ``stderr_tail``. Only the opening is
wrapped: an exception from the caller's own ``async with`` body is theirs to keep.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import anyio

from mesh._errors import CallTimeout, ConnectFailed, ConnectionLost, MeshError, Unauthorized
from transports import CloseCode, FrameRejected, TransportClosed, TransportError

__all__ = ["map_transport_errors", "translate_transport_error"]

#: Close codes and HTTP statuses that mean "your credentials were refused".
_REFUSED_CLOSES: Final = frozenset({CloseCode.UNAUTHORIZED, CloseCode.FORBIDDEN})
_REFUSED_STATUSES: Final = frozenset({401, 403})

#: What a dial can raise besides the mesh's own errors. TimeoutError and ssl.SSLError
#: are OSErrors; anyio's stream errors come from a peer that hung up mid-handshake.
_FOREIGN: Final = (TransportError, OSError, anyio.BrokenResourceError, anyio.EndOfStream)


@contextmanager
def map_transport_errors(*, agent: str | None, transport: str | None = None) -> Iterator[None]:
    """Translate what escapes the block into a :class:`~mesh.MeshError`, chained with ``from``.

    ``agent`` and ``transport`` fill in whatever context the error lacks; pass
    ``transport=None`` when the connector is opaque (the transport's own message,
    which names the URL or command, then says where).
    """
    try:
        yield
    except (MeshError, *_FOREIGN) as exc:
        mapped = translate_transport_error(exc)
        mapped.with_context(agent=agent, transport=transport)
        if mapped is exc:
            raise
        raise mapped from exc


def translate_transport_error(exc: Exception) -> MeshError:
    """The mesh's error for ``exc``, raised while a link was being opened (``exc`` if it fits)."""
    if isinstance(exc, MeshError):
        return _reclassified(exc)
    if isinstance(exc, TransportClosed):
        return _closed(exc.describe(), exc, method=None)
    if isinstance(exc, FrameRejected) and exc.status in _REFUSED_STATUSES:
        return Unauthorized(f"credentials refused: {exc}")
    if isinstance(exc, TimeoutError):
        return CallTimeout(f"timed out while connecting: {_cause(exc)}")
    if isinstance(exc, ssl.SSLError):
        return ConnectFailed(f"TLS handshake failed: {_cause(exc)}")
    if isinstance(exc, FileNotFoundError) and exc.filename is not None:
        # A stdio agent's command that is not there: say so, as a shell would.
        return ConnectFailed(
            f"cannot start: command not found: {exc.filename!r} (FileNotFoundError)"
        )
    return ConnectFailed(f"cannot connect: {_cause(exc)}")


def _reclassified(exc: MeshError) -> MeshError:
    # A link that dies before the handshake answered never came up: say so, and a
    # close that refused the token is about the credentials, not the link.
    if isinstance(exc, ConnectionLost) and not isinstance(exc, ConnectFailed):
        mapped = _closed(exc.message, exc, method=exc.method)
        return mapped.with_context(agent=exc.agent, transport=exc.transport)
    return exc


def _closed(
    reason: str, evidence: TransportClosed | ConnectionLost, *, method: str | None
) -> MeshError:
    if evidence.close_code in _REFUSED_CLOSES:
        refused = Unauthorized(f"credentials refused: {reason}", method=method)
        refused.close_code = evidence.close_code
        return refused
    failed = ConnectFailed(reason, method=method)
    failed.exit_code = evidence.exit_code
    failed.close_code = evidence.close_code
    failed.stderr_tail = tuple(evidence.stderr_tail)
    return failed


def _cause(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
