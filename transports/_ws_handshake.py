"""The WebSocket opening handshake (RFC 6455 section 4), both sides, as bytes: no I/O.

The daemon's HTTP server has parsed an upgrade request (llhttp) before a WebSocket
sees it, so the accepting side checks the handshake from that parsed head and writes
its ``101`` from a template, rather than handing the head to websockets'
``ServerProtocol`` to be checked again header by header. The dialling side writes its
request the same way and checks the ``101`` it reads with a small strict parse. Both
then hand the socket to a websockets frames ``Protocol`` already open. A refusal is
the HTTP answer websockets gives (the same status), naming the rule it broke.

The mesh negotiates no extension (permessage-deflate is off: see
:mod:`transports._websocket`); the one subprotocol is ``mesh``, which a browser offers
beside its token and the server selects.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from transports._auth import WS_PROTOCOL

__all__ = [
    "MAX_SWITCH_HEAD",
    "BadResponse",
    "Refusal",
    "Switched",
    "accept_key",
    "check_switch",
    "check_upgrade",
    "new_key",
    "refusal_response",
    "switching_response",
    "upgrade_request",
]

#: RFC 6455 1.3: what the server appends to the client's key before hashing it.
_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: RFC 7230 3.2.6: the characters of a token (a subprotocol's name, an upgrade's).
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: The largest response head a dialler reads for the 101 (websockets' own line
#: bound; a 101 with its few headers is under 300 bytes).
MAX_SWITCH_HEAD: Final = 8192
_CRLF: Final = b"\r\n"


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a ``Sec-WebSocket-Key``: base64(sha1(key + GUID))."""
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def _tokens(values: Sequence[str]) -> list[str]:
    """The comma-separated elements of a list header, every occurrence together."""
    found = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if item:
                found.append(item)
    return found


# -- the accepting side ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refusal:
    """An upgrade refused: the status websockets gives, and the rule, said in its body."""

    status: int
    why: str
    headers: tuple[tuple[str, str], ...] = ()


#: What the checks read, each occurrence kept (a repeated key or version is refused).
_WANTED: Final = frozenset(
    ("connection", "upgrade", "sec-websocket-key", "sec-websocket-version", "origin",
     "sec-websocket-protocol")
)  # fmt: skip


def check_upgrade(
    method: str, version: str, headers: Sequence[tuple[str, str]]
) -> tuple[str, str | None] | Refusal:
    """The accept key and the subprotocol selected (``mesh`` or None) for a valid
    upgrade request; else the :class:`Refusal` (``headers``' names are lower case)."""
    if method != "GET":
        return Refusal(405, f"a WebSocket upgrade is a GET, not {method} (RFC 6455 4.1)",
                       (("Allow", "GET"),))  # fmt: skip
    if version != "1.1":
        return Refusal(505, f"a WebSocket upgrade is HTTP/1.1, not HTTP/{version} (RFC 6455 4.1)")
    seen: dict[str, list[str]] = {}
    for name, value in headers:
        if name in _WANTED:
            seen.setdefault(name, []).append(value)
    refused = _check_upgrade_headers(seen)
    if refused is not None:
        return refused
    key = seen["sec-websocket-key"][0]
    return accept_key(key), _select_subprotocol(seen.get("sec-websocket-protocol", ()))


def _lists(values: Sequence[str], token: str) -> bool:
    """Whether the list header's ``values`` hold ``token`` (lower case), in any case."""
    if len(values) == 1 and "," not in values[0]:  # the usual lone value: no list to split
        return values[0].strip().lower() == token
    return any(item.lower() == token for item in _tokens(values))


def _is_alone(values: Sequence[str], token: str) -> bool:
    """Whether the list header's ``values`` hold ``token`` (lower case) and nothing else."""
    if len(values) == 1 and "," not in values[0]:
        return values[0].strip().lower() == token
    items = _tokens(values)
    return len(items) == 1 and items[0].lower() == token


def _check_upgrade_headers(seen: dict[str, list[str]]) -> Refusal | None:
    """The first rule of RFC 6455 4.2.1 the headers break, in websockets' order."""
    if not _lists(seen.get("connection", ()), "upgrade"):
        return _upgrade_required("Connection must list `upgrade`")
    if not _is_alone(seen.get("upgrade", ()), "websocket"):
        return _upgrade_required("Upgrade must be `websocket` alone")
    keys = seen.get("sec-websocket-key", ())
    if len(keys) != 1:
        return Refusal(400, f"Sec-WebSocket-Key must be sent once ({_times(len(keys))})")
    if not _is_key(keys[0]):
        return Refusal(400, "Sec-WebSocket-Key must be the base64 of 16 bytes")
    versions = seen.get("sec-websocket-version", ())
    if len(versions) != 1 or versions[0] != "13":
        why = "Sec-WebSocket-Version must be 13"
        if len(versions) != 1:
            why += f", sent once ({_times(len(versions))})"
        # RFC 6455 4.4: the version this server speaks, for a client that can pick.
        return Refusal(400, why, (("Sec-WebSocket-Version", "13"),))
    if len(seen.get("origin", ())) > 1:
        return Refusal(400, "Origin must be sent at most once (RFC 6454 7.3)")
    offered = seen.get("sec-websocket-protocol")
    if offered and not all(_TOKEN.fullmatch(item) for item in _tokens(offered)):
        return Refusal(400, "Sec-WebSocket-Protocol must be a list of tokens")
    return None


def _upgrade_required(why: str) -> Refusal:
    return Refusal(426, f"{why} to open a WebSocket (RFC 6455 4.2.1)", (("Upgrade", "websocket"),))


def _times(count: int) -> str:
    return "missing" if count == 0 else f"sent {count} times"


def _is_key(key: str) -> bool:
    try:
        return len(base64.b64decode(key.encode(), validate=True)) == 16
    except (binascii.Error, UnicodeEncodeError):
        return False


def _select_subprotocol(offered: Sequence[str]) -> str | None:
    # A browser offers `mesh` beside its token (see transports._auth.protocol_token):
    # select it; anything else offered is ignored, as it was before a subprotocol existed.
    return WS_PROTOCOL if WS_PROTOCOL in _tokens(offered) else None


def switching_response(
    accept: str, subprotocol: str | None, extra: Iterable[tuple[str, str]] = ()
) -> bytes:
    """The ``101``: no ``Date`` (RFC 7231 7.1.1.2 leaves it to the server for a 1xx)."""
    lines = [
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: %s\r\n" % accept.encode()
    ]
    if subprotocol is not None:
        lines.append(b"Sec-WebSocket-Protocol: %s\r\n" % subprotocol.encode())
    # ``extra`` repeats values a client sent, already held to short printable ones.
    lines.extend(b"%s: %s\r\n" % (name.encode(), value.encode()) for name, value in extra)
    lines.append(_CRLF)
    return b"".join(lines)


def refusal_response(
    status: int, reason: str, why: str, extra: Iterable[tuple[str, str]] = ()
) -> bytes:
    """A refused upgrade's answer: plain text saying why, and the connection closes."""
    body = f"Failed to open a WebSocket connection: {why}.\n".encode()
    head = [
        b"HTTP/1.1 %d %s\r\n" % (status, reason.encode()),
        b"Connection: close\r\nContent-Type: text/plain; charset=utf-8\r\n",
        b"Content-Length: %d\r\n" % len(body),
        *(b"%s: %s\r\n" % (name.encode(), value.encode()) for name, value in extra),
        _CRLF,
    ]
    return b"".join(head) + body


# -- the dialling side -------------------------------------------------------------------


def new_key() -> str:
    """A fresh ``Sec-WebSocket-Key``: 16 random bytes, base64."""
    return base64.b64encode(secrets.token_bytes(16)).decode()


def upgrade_request(
    host: str, resource: str, key: str, headers: Sequence[tuple[str, str]]
) -> bytes:
    """The dialler's upgrade request; ``headers`` (the token, offers) follow the handshake's."""
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"a request header holds CR or LF: {name!r}")
    lines = [
        f"GET {resource} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n",
        *(f"{name}: {value}\r\n" for name, value in headers),
        "\r\n",
    ]
    return "".join(lines).encode()


@dataclass(frozen=True, slots=True)
class Switched:
    """A response head read by the dialler: its status and reason, its headers (names
    lower case), and, for a ``101``, the rule it broke (None: the switch is good)."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    broken: str | None = None

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


class BadResponse(Exception):
    """The bytes are not an HTTP/1.1 response head; says why."""


_STATUS_LINE: Final = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9]) ?([^\r\n]*)")
#: A header line: its name, and its value from the first character that is not a
#: space or tab (the trailing ones are stripped after: a lazy value before ``[ \t]*``
#: made the match try every length of the value, 2.5 µs a line against 0.6).
_HEADER_LINE: Final = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\r\n]*)")


def check_switch(head: bytes, key: str, offered: Sequence[str] = ()) -> Switched:
    """The response head (through its blank line, not included), checked as a ``101``
    answering ``key``; ``offered`` are the subprotocols the dialler sent. Raises
    :class:`BadResponse` when the bytes are not a response head at all."""
    lines = head.split(_CRLF)
    status = _STATUS_LINE.fullmatch(lines[0])
    if status is None:
        raise BadResponse("not an HTTP/1.1 status line")
    headers = []
    for line in lines[1:]:
        field = _HEADER_LINE.fullmatch(line)
        if field is None:
            raise BadResponse("a malformed header line")
        headers.append((field[1].decode().lower(), field[2].rstrip(b" \t").decode("latin-1")))
    switched = Switched(int(status[1]), status[2].decode("latin-1"), tuple(headers))
    if switched.status != 101:
        return switched
    broken = _broken_switch(switched.headers, key, offered)
    if broken is None:
        return switched
    return Switched(switched.status, switched.reason, switched.headers, broken)


def _broken_switch(
    headers: Sequence[tuple[str, str]], key: str, offered: Sequence[str]
) -> str | None:
    """The first rule of RFC 6455 4.1 a ``101`` breaks, in websockets' order."""
    seen: dict[str, list[str]] = {}
    for name, value in headers:
        seen.setdefault(name, []).append(value)
    if not _lists(seen.get("connection", ()), "upgrade"):
        return "its Connection does not list `upgrade`"
    if not _is_alone(seen.get("upgrade", ()), "websocket"):
        return "its Upgrade is not `websocket`"
    accepts = seen.get("sec-websocket-accept", ())
    if len(accepts) != 1 or accepts[0] != accept_key(key):
        return "its Sec-WebSocket-Accept does not answer our key"
    if seen.get("sec-websocket-extensions"):
        return "it names an extension, and none was offered"
    protocols = seen.get("sec-websocket-protocol")
    chosen = _tokens(protocols) if protocols else ()
    if chosen and (len(chosen) != 1 or chosen[0] not in offered):
        return "its Sec-WebSocket-Protocol is not one we offered"
    return None
