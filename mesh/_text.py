"""Text from agents and clients, made safe to show on a terminal.

An agent's reply, a room's topic or a registered id can hold escape sequences:
``ESC [ 2 J`` clears the screen, ``ESC ] 0 ; … BEL`` retitles the window, a C1
``CSI`` (U+009B) does what ``ESC [`` does on many terminals, and bidi overrides
reorder what is read. Output is data: :func:`printable` writes every control
character but newline and tab as a visible escape (``\\x1b``, ``\\u202e``), and
:func:`json_text` writes JSON whose value is exactly the input's, with the same
characters as ``\\u`` escapes (JSON's own escaping leaves DEL and C1 raw).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["json_text", "printable", "safe_json"]

#: C0 but newline and tab, DEL, C1, and the bidi embeddings, overrides and isolates.
_UNSAFE: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every terminal control character but newline and tab made visible."""
    return text if _UNSAFE.search(text) is None else _UNSAFE.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_text(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON for a terminal: exact, with control characters as ``\\u`` escapes.

    Outside strings JSON is plain ASCII, so escaping every control character
    wherever it occurs changes no value.
    """
    return safe_json(json.dumps(value, indent=indent, ensure_ascii=False))


def safe_json(encoded: str) -> str:
    """Already-encoded JSON with the control characters JSON left raw turned into escapes."""
    return _UNSAFE.sub(_json_escape, encoded)
