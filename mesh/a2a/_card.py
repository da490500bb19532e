"""An agent's A2A card: who it is, what it can do (its tools as skills), how to reach it.

Built from the agent's ``agent/info`` and ``tools/list`` (every mesh agent and
every mount answers both). Each tool is a skill whose ``id`` is the tool's name,
with an example of the data part that calls it; a chat agent (a persona) has a
``chat`` skill, which plain text reaches. The card declares the one scheme the
daemon accepts (HTTP ``Bearer``, a mesh token) and three interfaces on one
URL: JSON-RPC 1.0 and 0.3, and HTTP+JSON 1.0 (its paths are under that URL).
The card is 1.0's strict one unless a client asks for 0.3 by name (an
``A2A-Version: 0.3`` header): then the 0.3 fields (``url``, ``preferredTransport``,
``protocolVersion``, ``additionalInterfaces``), which 0.3 clients find the endpoint
by and 1.0's schema forbids, are added. A card is fetched before any version is
agreed, and a 1.0 client that validates it must not meet fields its schema refuses.

Its response carries the validators a cache revalidates by: an ``ETag`` of the card,
and a ``Last-Modified`` that is when this process first saw what the card is made of
(the agent's facts, not the URL it was asked at) as it is now.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from email.utils import formatdate, parsedate_to_datetime
from typing import Any, Final

import msgspec

from transports import HttpRequest, HttpResponse

__all__ = ["MODES", "Revisions", "build_card", "card_etag", "card_response", "wants_legacy"]

MODES: Final = ["text/plain", "application/json"]
_ENCODER: Final = msgspec.json.Encoder(order="deterministic")


def _example(tool: Mapping[str, Any]) -> str:
    schema = tool.get("inputSchema")
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    arguments = {k: f"<{v.get('type', 'value')}>" for k, v in props.items() if isinstance(v, dict)}
    return json.dumps({"tool": tool.get("name"), "arguments": arguments})


def _skill(agent: str, tool: Mapping[str, Any]) -> dict[str, Any]:
    name = str(tool.get("name"))
    return {
        "id": name,
        "name": str(tool.get("title") or name),
        "description": str(tool.get("description") or f"the tool {name!r} of {agent}")
        + ' Call it with a data part {"tool": "'
        + name
        + '", "arguments": {...}}.',
        "tags": ["tool", agent],
        "examples": [_example(tool)],
        "inputModes": ["application/json"],
        "outputModes": MODES,
    }


def _chat_skill(agent: str) -> dict[str, Any]:
    return {
        "id": "chat",
        "name": "chat",
        "description": f"Talk with {agent}: each text message is a turn of the conversation"
        " its contextId names; the reply streams as it is written.",
        "tags": ["chat", agent],
        "examples": ["What do you think of the plan?"],
        "inputModes": ["text/plain"],
        "outputModes": ["text/plain"],
    }


def build_card(
    agent: str,
    info: Mapping[str, Any],
    tools: list[Mapping[str, Any]],
    *,
    chat: bool,
    url: str,
    push: bool = False,
    legacy: bool = True,
) -> dict[str, Any]:
    """The card of ``agent``, served at ``url`` (its JSON-RPC endpoint); ``legacy``
    adds the fields of 0.3 (see the module docstring)."""
    skills = [_chat_skill(agent)] if chat else []
    skills += [_skill(agent, t) for t in tools if isinstance(t, Mapping) and t.get("name")]
    card = {
        "name": str(info.get("name") or agent),
        "description": str(info.get("description") or f"The mesh agent {agent}."),
        "version": str(info.get("version") or "0.0.0"),
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ],
        "provider": {"organization": "agent-mesh", "url": url},
        "capabilities": {"streaming": True, "pushNotifications": push},
        "securitySchemes": {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "a token of the mesh daemon (mesh token create)",
                }
            }
        },
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": MODES,
        "defaultOutputModes": MODES,
        "skills": skills,
    }
    if legacy:
        card.update(url=url, preferredTransport="JSONRPC", protocolVersion="0.3.0")
        card["additionalInterfaces"] = [
            {"url": url, "transport": "JSONRPC"},
            {"url": url, "transport": "HTTP+JSON"},
        ]
    return card


def card_etag(card: Mapping[str, Any]) -> str:
    return '"' + hashlib.sha256(_ENCODER.encode(card)).hexdigest()[:32] + '"'


def wants_legacy(header: str | None) -> bool:
    """Whether an ``A2A-Version`` header asks for the card with 0.3's fields: only when
    it names 0.3 (a card is read before versions are agreed, so it defaults to 1.0)."""
    value = (header or "").strip()
    return value == "0.3" or value.startswith("0.3.")


class Revisions:
    """When each agent's card last changed, as this process saw it, in whole seconds
    (HTTP dates have no finer ones): the card is built per request, so its date is kept
    by what it is made of, ``facts``, which the URL it is asked at is not part of."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[str, float]] = {}

    def since(self, agent: str, facts: Mapping[str, Any]) -> float:
        """The time ``agent``'s card came to be made of ``facts``."""
        tag = card_etag(facts)
        kept = self._seen.get(agent)
        if kept is None or kept[0] != tag:
            kept = self._seen[agent] = (tag, float(math.floor(self._clock())))
        return kept[1]

    def forget(self, agents: Iterable[str]) -> None:
        for agent in agents:
            self._seen.pop(agent, None)


def card_response(card: Mapping[str, Any], since: float, request: HttpRequest) -> HttpResponse:
    """The card with its validators, or ``304`` when the client's copy is current: a
    matching ``If-None-Match``, or, without one, an ``If-Modified-Since`` not before
    ``since`` (HTTP's order: the entity tag is the stronger check)."""
    etag = card_etag(card)
    headers = [
        ("etag", etag),
        ("last-modified", formatdate(since, usegmt=True)),
        ("cache-control", "private, max-age=60"),
        ("vary", "A2A-Version"),
    ]
    if _current(request, etag, since):
        return HttpResponse(304, headers=headers)
    return HttpResponse(200, msgspec.json.encode(card), headers=headers)


def _current(request: HttpRequest, etag: str, since: float) -> bool:
    tags = request.header("if-none-match")
    if tags is not None:
        return any(t.strip() in (etag, "*", "W/" + etag) for t in tags.split(","))
    date = request.header("if-modified-since")
    if date is None:
        return False
    try:
        return since <= parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError):
        return False  # not an HTTP date: ignored, as RFC 9110 says
