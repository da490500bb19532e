"""Error codes and the one exception tree of the mesh.

::

    MeshError                       anything the mesh raises on purpose
    ├── RemoteError                 the peer answered a call with an error (``code`` is
    │   │                                   its code: -32001 and -32003 included, when
    │   │                                   an agent reports them of its own calls)
    │   ├── MethodNotFound          -32601  no such method or tool
    │   ├── InvalidParams           -32602  arguments failed validation
    │   └── ToolError               -32000  the handler raised
    ├── CallTimeout                 -32001  the call's deadline passed here, or a router
    │                                       says so (also a TimeoutError)
    ├── ConnectionLost              -32003  the link died: closed, child exited, peer
    │                                       silent (here, or a router's link)
    │   └── ConnectFailed           -32003  the link never came up: refused, unreachable,
    │                                       TLS rejected, command missing, died while starting
    ├── AgentUnavailable            -32004  unknown agent, or known to be offline
    ├── Unauthorized                -32005  missing, wrong or revoked token
    │                                       (HTTP 401/403, WebSocket close 4001/4003)
    ├── Forbidden                   -32007  a valid identity without the right (access, reserved)
    ├── MessageTooLarge             -32006  a frame over the size limit
    └── ProtocolError               -32700 / -32600  a frame that does not decode or validate

The wings add their own branches under :class:`MeshError`: ``ManifestError``
(:mod:`mesh.manifests`), ``RoomError`` (:mod:`mesh.rooms`), ``ProviderError``
(:mod:`mesh.providers`) and the daemon's ``SettingsError``.

What the peer said is kept apart from what happened here, as h11 keeps its
remote and local protocol errors apart. An error a peer answers with becomes the
class that matches its code, except the two that describe a link or a clock:
``-32001`` and ``-32003`` reported by an agent mean *its* call timed out or *its*
link died, so they arrive as a :class:`RemoteError` with that ``code``, never as
the :class:`CallTimeout` or :class:`ConnectionLost` this side raises for its own
deadline and link. A router relaying its verdict on the link it holds (``mesh/call``,
the daemon's API, a cluster holder) is another matter: ``relayed=True`` gives the
local class, so a timeout the mesh reports on a routed call is a
:class:`CallTimeout` here too. Every error can carry the
agent, method and transport it concerns; ``str()`` names them. What transports,
sockets, TLS and child processes raise is translated into this tree where the mesh
dials (``mesh._rpc.boundary``) and chained with ``from``, so the original is one
``__cause__`` away.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

__all__ = [
    "AgentUnavailable",
    "CallTimeout",
    "ConnectFailed",
    "ConnectionLost",
    "ErrorCode",
    "Forbidden",
    "InvalidParams",
    "MeshError",
    "MessageTooLarge",
    "MethodNotFound",
    "ProtocolError",
    "RemoteError",
    "ToolError",
    "Unauthorized",
    "error_from_code",
]


class ErrorCode(enum.IntEnum):
    """Every error code on the wire. JSON-RPC's where one fits, then the mesh's own."""

    PARSE_ERROR = -32700
    """The frame is not valid JSON (or not UTF-8)."""
    INVALID_REQUEST = -32600
    """The frame is JSON but not a valid message; the message names the path."""
    METHOD_NOT_FOUND = -32601
    """No such method, or no such tool for ``tools/call``."""
    INVALID_PARAMS = -32602
    """The params or tool arguments failed validation; the message names the path."""
    INTERNAL_ERROR = -32603
    """A bug in the mesh itself on the answering side."""
    TOOL_ERROR = -32000
    """The handler raised; the message is the handler's."""
    TIMEOUT = -32001
    """The call's deadline passed."""
    CANCELLED = -32002
    """The caller cancelled the call."""
    CONNECTION_LOST = -32003
    """The connection to the agent closed or its process exited."""
    UNAVAILABLE = -32004
    """The agent is not known, or is known to be offline."""
    UNAUTHORIZED = -32005
    """Missing, wrong or revoked credentials."""
    TOO_LARGE = -32006
    """A message exceeded the size limit."""
    FORBIDDEN = -32007
    """The caller is known but may not do this: a manifest's access section refuses it,
    or the method is one only the daemon sends (``room/turn``, ``room/persona``, ``mesh/``)."""


class MeshError(Exception):
    """Base of every error the mesh raises on purpose."""

    default_code: ClassVar[int] = ErrorCode.INTERNAL_ERROR

    def __init__(
        self,
        message: str,
        *,
        agent: str | None = None,
        method: str | None = None,
        transport: str | None = None,
        data: Any = None,
        code: int | None = None,
    ) -> None:
        self.code = self.default_code if code is None else code
        self.message = message
        self.agent = agent
        self.method = method
        self.transport = transport
        self.data = data
        super().__init__(message)

    def __str__(self) -> str:
        where = []
        if self.method is not None:
            where.append(f"method {self.method!r}")
        if self.agent is not None:
            where.append(f"agent {self.agent!r}")
        if self.transport is not None:
            where.append(f"over {self.transport}")
        return f"{self.message} ({', '.join(where)})" if where else self.message

    def with_context(
        self, *, agent: str | None = None, method: str | None = None, transport: str | None = None
    ) -> MeshError:
        """Fill in whatever context is still missing; returns ``self``."""
        self.agent = self.agent if self.agent is not None else agent
        self.method = self.method if self.method is not None else method
        self.transport = self.transport if self.transport is not None else transport
        return self


class RemoteError(MeshError):
    """The peer answered with an error; ``code`` is the code it sent."""

    default_code = ErrorCode.TOOL_ERROR


class MethodNotFound(RemoteError):
    default_code = ErrorCode.METHOD_NOT_FOUND


class InvalidParams(RemoteError):
    default_code = ErrorCode.INVALID_PARAMS


class ToolError(RemoteError):
    """Raise this in a handler to answer with a chosen message (and code, via ``data``)."""

    default_code = ErrorCode.TOOL_ERROR


class CallTimeout(MeshError, TimeoutError):
    default_code = ErrorCode.TIMEOUT


class ConnectionLost(MeshError):
    """The link to the agent is gone; ``exit_code``/``close_code`` say how, when known."""

    default_code = ErrorCode.CONNECTION_LOST
    exit_code: int | None = None
    close_code: int | None = None
    stderr_tail: tuple[str, ...] = ()


class ConnectFailed(ConnectionLost):
    """Opening the link failed: nothing to talk to, or it died before answering ``agent/info``.

    A refused or unreachable dial, a TLS handshake that failed (the message holds
    the TLS reason), a stdio command that does not exist or cannot run, or a child
    that exited while starting (``exit_code`` and ``stderr_tail`` say how). A
    :class:`ConnectionLost`, so code that only asks "is the link down?" need not
    tell the two apart; the transport's own exception is the ``__cause__``.
    """


class AgentUnavailable(MeshError):
    default_code = ErrorCode.UNAVAILABLE


class Unauthorized(MeshError):
    """The credentials were refused; ``close_code`` is 4001/4003 when a WebSocket close said so."""

    default_code = ErrorCode.UNAUTHORIZED
    close_code: int | None = None


class Forbidden(MeshError):
    """Authenticated, but not allowed: the access section or a reserved method refuses it."""

    default_code = ErrorCode.FORBIDDEN


class MessageTooLarge(MeshError):
    default_code = ErrorCode.TOO_LARGE


class ProtocolError(MeshError):
    default_code = ErrorCode.INVALID_REQUEST


_BY_CODE: dict[int, type[MeshError]] = {
    ErrorCode.PARSE_ERROR: ProtocolError,
    ErrorCode.INVALID_REQUEST: ProtocolError,
    ErrorCode.METHOD_NOT_FOUND: MethodNotFound,
    ErrorCode.INVALID_PARAMS: InvalidParams,
    ErrorCode.TOOL_ERROR: ToolError,
    ErrorCode.TIMEOUT: CallTimeout,
    ErrorCode.CANCELLED: RemoteError,
    ErrorCode.CONNECTION_LOST: ConnectionLost,
    ErrorCode.UNAVAILABLE: AgentUnavailable,
    ErrorCode.UNAUTHORIZED: Unauthorized,
    ErrorCode.TOO_LARGE: MessageTooLarge,
    ErrorCode.FORBIDDEN: Forbidden,
}


#: Codes about a link or a deadline: this side's own kinds only when a router relays them.
_LOCAL_KINDS = frozenset({ErrorCode.TIMEOUT, ErrorCode.CONNECTION_LOST})


def error_from_code(
    code: int,
    message: str,
    *,
    agent: str | None = None,
    method: str | None = None,
    transport: str | None = None,
    data: Any = None,
    relayed: bool = False,
) -> MeshError:
    """The exception for an error a peer sent us. Unknown codes become :class:`RemoteError`.

    ``relayed``: the peer is a router giving its verdict on the link it holds to the
    agent (see the module docstring); otherwise a timeout or a lost link the peer
    reports is a :class:`RemoteError` with that code.
    """
    cls = _BY_CODE.get(code, RemoteError)
    if code in _LOCAL_KINDS and not relayed:
        cls = RemoteError
    return cls(message, agent=agent, method=method, transport=transport, data=data, code=code)
