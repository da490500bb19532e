"""An agent's A2A card: who it is, what it can do (its tools as skills), how to reach it.

Built from the agent's ``agent/info`` and ``tools/list`` (every mesh agent and
every mount answers both). Each tool is a skill whose ``id`` is the tool's name,
with an example of the data part that calls it; a chat agent (a persona) has a
``chat`` skill, which plain text reaches. The card declares the one scheme the
daemon accepts (HTTP ``Bearer``, a mesh token) and three interfaces on one
URL: JSON-RPC 1.0 and 0.3, and HTTP+JSON 1.0 (its paths are under that URL).
The 0.3 fields (``url``, ``preferredTransport``, ``protocolVersion``, and
``additionalInterfaces``), which 0.3 clients need to find the endpoint and 1.0's strict
schema does not allow, are added unless the card is asked for as 1.0 (an
``A2A-Version: 1.0`` header): an empty header means 0.3, as everywhere in A2A.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

import msgspec

__all__ = ["MODES", "build_card", "card_etag"]

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
