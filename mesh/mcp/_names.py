"""MCP names for the mesh's tools: unique, legal, and saying whose tool it is.

An agent's tool ``echo`` on agent ``echo-stdio`` is offered as
``echo-stdio__echo``: the agent id, two underscores, the tool's name. The spec
(2025-11-25) allows 1-128 of ``A-Z a-z 0-9 _ - .``; hosts are stricter (several
LLM APIs accept only ``[A-Za-z0-9_-]{1,64}``), so we keep to that. Anything
outside it becomes ``_``; a name that had to change that way, was cut to length,
or would be shared by two pairs (``a__b`` + ``c`` and ``a`` + ``b__c``) ends
with ``_`` and six hex digits of a hash of the exact pair instead, so it stays
unique and stable while the set of tools stays the same.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable
from typing import Final

__all__ = ["MAX_NAME_LENGTH", "SEPARATOR", "exposed_names"]

SEPARATOR: Final = "__"
MAX_NAME_LENGTH: Final = 64
_ILLEGAL: Final = re.compile(r"[^A-Za-z0-9_-]")
_SUFFIX_LENGTH: Final = 7  # "_" + six hex digits


def _plain(agent: str, tool: str) -> str:
    return f"{agent}{SEPARATOR}{tool}"


def _hashed(agent: str, tool: str) -> str:
    digest = hashlib.sha256(f"{agent}\0{tool}".encode()).hexdigest()[:6]
    stem = _ILLEGAL.sub("_", _plain(agent, tool))[: MAX_NAME_LENGTH - _SUFFIX_LENGTH]
    return f"{stem}_{digest}"


def _is_clean(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME_LENGTH and not _ILLEGAL.search(name)


def exposed_names(pairs: Iterable[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """Each ``(agent, tool)`` under its MCP name: the name -> the pair."""
    pairs = list(dict.fromkeys(pairs))
    plain = Counter(_plain(agent, tool) for agent, tool in pairs)
    names: dict[str, tuple[str, str]] = {}
    for agent, tool in pairs:
        name = _plain(agent, tool)
        if not _is_clean(name) or plain[name] > 1:
            name = _hashed(agent, tool)
        names[name] = (agent, tool)
    return names
