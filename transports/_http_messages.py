"""The HTTP messages the server hands to handlers and takes back: plain data, no I/O.

They sit below the server and its admission pools, which both speak of a request
(the pools ask the application, through ``vouch``, how far a request head's
credentials go) without either importing the other.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

import msgspec

__all__ = ["BodyWriter", "HttpRequest", "HttpResponse"]

#: A target that is its own path (``urlsplit`` would give it back as it is, and no query).
_PLAIN_PATH: Final = re.compile(r"/(?!/)[^?#;\t\n\r]*")
#: JSON bodies: msgspec also encodes Structs, sets and dataclasses the handlers return.
_JSON: Final = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    target: str  # the raw request target: path and query
    headers: tuple[tuple[str, str], ...]  # names lower-cased
    body: bytes = b""
    client: str = ""
    #: The HTTP version the request line named ("1.1", "1.0"): a WebSocket upgrade needs 1.1.
    version: str = "1.1"
    path: str = field(init=False)
    query: dict[str, list[str]] = field(init=False)

    def __post_init__(self) -> None:
        target = self.target
        if _PLAIN_PATH.fullmatch(target):  # most targets: no query, nothing to split
            object.__setattr__(self, "path", target)
            object.__setattr__(self, "query", {})
            return
        parts = urlsplit(target)
        object.__setattr__(self, "path", parts.path or "/")
        object.__setattr__(self, "query", parse_qs(parts.query))

    def with_body(self, body: bytes) -> HttpRequest:
        """This request with its body: the head (target, query) is not parsed again."""
        copy = object.__new__(HttpRequest)
        for name in HttpRequest.__slots__:
            object.__setattr__(copy, name, getattr(self, name))
        object.__setattr__(copy, "body", body)
        return copy

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        for key, value in self.headers:
            if key == wanted:
                return value
        return None

    def query_value(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None


#: Writes one piece of a streamed body; raises once the client is gone.
BodyWriter = Callable[[bytes], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: Sequence[tuple[str, str]] = ()
    #: A body written piece by piece (server-sent events): ``await stream(write)`` after
    #: the head, chunked; ``body`` is ignored. Each piece has ``request_timeout`` to go
    #: out, so a client that stops reading ends the stream rather than pinning it.
    stream: Callable[[BodyWriter], Awaitable[None]] | None = None

    @classmethod
    def json(cls, status: int, payload: Any) -> HttpResponse:
        return cls(status, _JSON.encode(payload))

    @classmethod
    def error(cls, status: int, message: str, **extra: Any) -> HttpResponse:
        """A JSON error body that says why: ``{"error": {"status": 400, "message": ...}}``."""
        return cls.json(status, {"error": {"status": status, "message": message, **extra}})
