"""Input from clients and peers, read without surprises.

Python raises errors of its own, besides the decoder's, for some bad input: msgspec
reports a string that is not UTF-8, and nesting past its depth, with
``UnicodeDecodeError`` and ``RecursionError``; ``str.isdigit`` says yes to "²",
which ``int`` then refuses. Each reader of client input takes them from here, so
none answers bad input with an exception.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import msgspec

__all__ = [
    "ADMIN_TOKEN_FILE",
    "DEFAULT_DATA_DIR",
    "UNREADABLE_JSON",
    "MalformedToken",
    "bearer_token",
    "find_token",
    "whole_number",
    "why_unreadable",
]

#: The file in the daemon's data directory that holds its admin token.
ADMIN_TOKEN_FILE: Final = "admin.token"
#: Where the daemon keeps its data unless told otherwise (``data_dir``).
DEFAULT_DATA_DIR: Final = ".mesh"

#: What decoding JSON from a peer or a client can raise: msgspec's own error, and
#: Python's for a string that is not UTF-8 (checked only when a string is built) and
#: for nesting past the decoder's depth. Each is bad input, to be answered as such.
UNREADABLE_JSON: Final = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


def why_unreadable(exc: BaseException) -> str:
    """What is wrong with JSON that raised ``exc`` (one of :data:`UNREADABLE_JSON`), in words."""
    if isinstance(exc, UnicodeDecodeError):
        return f"a string is not valid UTF-8 ({exc.reason})"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    return str(exc)


def whole_number(text: str, digits: int = 18) -> int | None:
    """``text`` as a whole number of at most ``digits`` ASCII digits; None if it is not one.

    ``str.isdigit`` also says yes to "²" and to digits of other scripts, which ``int``
    then refuses, and ``int`` refuses more than 4,300 digits: a cursor or a page token
    from a client is checked here, so neither reaches a handler as an exception.
    """
    if not text or len(text) > digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)


class MalformedToken(ValueError):
    """A token read from a file, a flag or the environment that no daemon could accept.

    Its message says what is wrong (lines, whitespace, characters) and where the token came
    from, never the token: a wrong file (a password file, say) must not reach a terminal."""


def bearer_token(text: str, source: str) -> str:
    """``text`` as a token to present, without surrounding whitespace (a file's newline).

    A token travels in an HTTP header or a WebSocket subprotocol, so it is one run of
    printable ASCII without spaces; anything else raises :class:`MalformedToken` naming
    ``source`` (``--token-file x``, ``$MESH_TOKEN``), before a request can echo it.
    """
    token = text.strip()
    lines = len(token.splitlines())
    if lines > 1:
        why = f"{lines} lines, where a token is one"
    elif any(character.isspace() for character in token):
        why = "whitespace inside it"
    elif not (token.isascii() and token.isprintable()):
        why = "characters a token never has (control or non-ASCII)"
    else:
        return token
    raise MalformedToken(f"the token from {source} is malformed: {why} (its value is not shown)")


def find_token(
    environ: Mapping[str, str] | None = None, *, data_dir: str | os.PathLike[str] | None = None
) -> str | None:
    """The token a local client uses by default: ``$MESH_TOKEN``, else the admin token
    file in ``data_dir`` (default ``$MESH_DATA_DIR``, else ``.mesh``); None if neither.

    Here, beside the check it makes, rather than with the daemon's token store: a
    ``mesh`` command looks its token up without loading the daemon's side.

    Raises :class:`MalformedToken` (never showing the value) for one that cannot be a
    token: a stray newline would otherwise reach an HTTP header, whose error quotes it."""
    env = os.environ if environ is None else environ
    if env.get("MESH_TOKEN", "").strip():
        return bearer_token(env["MESH_TOKEN"], "$MESH_TOKEN")
    path = Path(data_dir or env.get("MESH_DATA_DIR") or DEFAULT_DATA_DIR) / ADMIN_TOKEN_FILE
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    return bearer_token(text, str(path)) if text.strip() else None
