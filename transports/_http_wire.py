"""HTTP/1.1 on the wire for the server: request heads parsed by llhttp, answers written as bytes.

Parsing HTTP in Python was most of a served call's CPU: httptools (llhttp in C, what
uvicorn parses with) reads the request, and an answer is a few byte strings joined.
No I/O here: :mod:`transports._http_server` reads the socket and applies the limits.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Final

import httptools

__all__ = ["LAST_CHUNK", "BadRequest", "Head", "RequestParser", "chunk", "response_head"]

#: The end of a chunked body.
LAST_CHUNK: Final = b"0\r\n\r\n"
_SERVER: Final = b"server: agent-mesh\r\n"
_CLOSE: Final = b"connection: close\r\n"


class BadRequest(Exception):
    """The bytes are not an HTTP/1.1 request (or not one the server takes); says why."""


class Head:
    """A request's line and headers, as the parser gave them (names lower-cased)."""

    __slots__ = ("chunked", "headers", "keep_alive", "length", "method", "target", "version")

    def __init__(self) -> None:
        self.method = b""
        self.target = b""
        self.version = "1.1"
        self.headers: list[tuple[bytes, bytes]] = []
        #: The body's declared length (None: none declared, or chunked).
        self.length: int | None = None
        self.chunked = False
        #: The connection may serve another request after this one's answer.
        self.keep_alive = True

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


class RequestParser:
    """One request: feed its head, then (chunked) its body; what llhttp reports is kept.

    A fresh parser per request: what comes after a request is the next one's, and the
    server frames heads and counted bodies itself (a head's size is its limit's business).
    """

    __slots__ = (
        "_head_done",
        "_line_done",
        "_parser",
        "body",
        "body_size",
        "complete",
        "head",
        "overran",
    )

    def __init__(self) -> None:
        self.head = Head()
        self.body: list[bytes] = []
        self.body_size = 0
        self.complete = False
        #: Bytes past the end of a chunked body came in the same read (a pipelined request).
        self.overran = False
        self._line_done = False
        self._head_done = False
        self._parser = httptools.HttpRequestParser(self)

    def feed_head(self, data: bytes | bytearray | memoryview) -> None:
        """The whole head, through its blank line; raises :class:`BadRequest`."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # llhttp stops at an upgrade's head: the server decides what follows
        except httptools.HttpParserError as exc:
            # A request line may hold a token (``?token=``): its error quotes nothing.
            if not self._line_done:
                raise BadRequest("illegal request line") from None
            raise BadRequest(_reason_of(exc)) from None
        if not self._head_done:
            return  # more of the head is to come
        head = self.head
        head.version = self._parser.get_http_version()
        head.keep_alive = head.version == "1.1" and self._parser.should_keep_alive()
        if head.version == "1.1" and head.header(b"host") is None:
            raise BadRequest("missing mandatory Host header")

    def feed_body(self, data: bytes | bytearray) -> None:
        """A piece of a chunked body; raises :class:`BadRequest`."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise BadRequest(_reason_of(exc)) from None

    # llhttp's callbacks.

    def on_message_begin(self) -> None:
        if self.complete:
            self.overran = True

    def on_url(self, url: bytes) -> None:
        self.head.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._line_done = True
        name = name.lower()
        head = self.head
        head.headers.append((name, value))
        if name == b"content-length":
            head.length = int(value)  # llhttp let only digits through
        elif name == b"transfer-encoding" and value.lower().endswith(b"chunked"):
            head.chunked = True

    def on_headers_complete(self) -> None:
        self._line_done = self._head_done = True
        self.head.method = self._parser.get_method()

    def on_body(self, body: bytes) -> None:
        if not self.complete:
            self.body.append(body)
            self.body_size += len(body)

    def on_message_complete(self) -> None:
        self.complete = True


def _reason_of(exc: Exception) -> str:
    """llhttp's reason, without the bytes it quotes (a request line may hold a token)."""
    return str(exc).partition(":")[0][:80] or type(exc).__name__


def response_head(status: int, headers: list[tuple[bytes, bytes]], *, close: bool = False) -> bytes:
    """``HTTP/1.1 <status> <reason>`` and the headers, through the blank line.

    Header values come from handlers, and some repeat what a client sent: one that
    would split the head (CR or LF) is refused here rather than written.
    """
    lines = [b"%s: %s\r\n" % (name, value) for name, value in headers]
    written = b"".join(lines)
    if written.count(b"\r") != len(lines) or written.count(b"\n") != len(lines):
        raise ValueError("a response header holds CR or LF")
    return b"".join(
        (
            b"HTTP/1.1 %d %s\r\n" % (status, _reason(status)),
            _SERVER,
            written,
            _CLOSE if close else b"",
            b"\r\n",
        )
    )


def chunk(data: bytes) -> bytes:
    """One piece of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _reason(status: int) -> bytes:
    """The standard reason phrase (``404 Not Found``); some clients show only that."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""
