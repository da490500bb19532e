"""How an A2A message becomes a mesh call, and a mesh result an A2A artifact.

A mesh agent has tools; an A2A agent takes messages. The rule (docs/a2a.md):

1. A **data part** ``{"tool": NAME, "arguments": {...}}`` calls tool ``NAME``
   with those arguments. This always works, and is what the card's skills say
   (each tool is a skill whose id is the tool's name).
2. A data part that is any other object, to an agent with **one tool**, is that
   tool's arguments.
3. **Text** (every text part, joined by newlines):
   - to a *chat* agent (a persona: it takes ``room/turn``) it is the next turn of
     a conversation, one per ``contextId``, whose reply streams as it is written;
   - to an agent with one tool that takes one string argument, it is that argument.

Anything else is refused with ``-32602`` naming the tools and the data-part form.
A result becomes one artifact named ``result``: a string as a text part, any
other value as a data part.
"""

from __future__ import annotations

import uuid
from collections import Counter, OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "CHAT_CAPABILITY",
    "Conversations",
    "Plan",
    "PlanError",
    "plan_call",
    "result_parts",
    "unsupported_media",
]

#: Agents that take room turns say so in the registry (persona agents do).
CHAT_CAPABILITY: Final = "chat"
ROOM_TURN: Final = "room/turn"
#: Conversations kept (one per client, agent and contextId); the oldest is forgotten.
MAX_CONVERSATIONS: Final = 1024
#: Of them, one client's: its own oldest is forgotten first, so one client opening
#: contexts without end cannot push the others' conversations out.
MAX_CONVERSATIONS_PER_OWNER: Final = 64
#: Messages of one conversation sent with each turn.
MAX_TURN_MESSAGES: Final = 64
#: Characters of one conversation kept (the newest message always is): what the
#: conversations hold stays bounded however long each message is.
MAX_CONVERSATION_CHARS: Final = 256 * 1024


class PlanError(ValueError):
    """The message does not say what to call (the text says how it could)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One mesh call: ``tools/call`` of ``tool`` with ``arguments``, or a chat turn."""

    tool: str | None  # None: a chat turn with ``text``
    arguments: dict[str, Any] = field(default_factory=dict)
    text: str = ""


def _texts(parts: list[dict[str, Any]]) -> str:
    return "\n".join(p["text"] for p in parts if isinstance(p.get("text"), str))


def _one_string_argument(tool: Mapping[str, Any]) -> str | None:
    schema = tool.get("inputSchema")
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        return None
    strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
    required = schema.get("required") if isinstance(schema, dict) else None
    required = [r for r in required or () if r in props]
    if len(strings) == 1 and set(required) <= set(strings):
        return str(strings[0])
    return None


def _how(agent: str, tools: list[Mapping[str, Any]]) -> str:
    names = ", ".join(str(t.get("name")) for t in tools) or "none"
    return (
        f'send a data part {{"tool": NAME, "arguments": {{...}}}} naming one of '
        f"{agent!r}'s tools ({names})"
    )


def plan_call(
    agent: str, message: Mapping[str, Any], tools: list[Mapping[str, Any]] | None, chat: bool
) -> Plan:
    """What ``message`` asks of ``agent`` (see the module docstring).

    ``tools`` may be None when the message names its tool (rule 1 needs no list).
    """
    parts: list[dict[str, Any]] = message["parts"]
    for part in parts:
        data = part.get("data")
        if isinstance(data, dict) and isinstance(data.get("tool"), str):
            arguments = data.get("arguments", {})
            if not isinstance(arguments, dict):
                raise PlanError(f"`arguments` of tool {data['tool']!r} must be an object")
            return Plan(data["tool"], dict(arguments))
    tools = tools or []
    objects = [p["data"] for p in parts if isinstance(p.get("data"), dict)]
    if objects and len(tools) == 1:
        return Plan(str(tools[0].get("name")), dict(objects[0]))
    text = _texts(parts)
    if text and chat:
        return Plan(None, text=text)
    if text and len(tools) == 1:
        argument = _one_string_argument(tools[0])
        if argument is not None:
            return Plan(str(tools[0].get("name")), {argument: text})
    raise PlanError(f"the message does not say which tool to call: {_how(agent, tools)}")


def unsupported_media(parts: list[dict[str, Any]], accepted: Collection[str]) -> str | None:
    """The first media type a part names that is not in ``accepted`` (None: all are).

    A part that names none is what its kind says (text, JSON, or a file kept in
    the history); parameters (``; charset=utf-8``) and case do not matter.
    """
    for part in parts:
        media = part.get("mediaType")
        if isinstance(media, str) and media and media.split(";")[0].strip().lower() not in accepted:
            return media
    return None


def result_parts(result: Any) -> list[dict[str, Any]]:
    """A mesh result as an artifact's parts."""
    if isinstance(result, str):
        return [{"text": result}]
    return [{"data": result}]


@dataclass(slots=True)
class _Conversation:
    turn: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    #: Tells the persona this conversation from another client's (or a forgotten one's)
    #: under the same context id: each starts at turn 1.
    epoch: str = field(default_factory=lambda: uuid.uuid4().hex)


class Conversations:
    """The chat turns of each (client, agent, contextId), so a persona hears the whole
    conversation, and the turn number that makes a retried turn idempotent."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, str, str], _Conversation] = OrderedDict()
        self._owned: Counter[str] = Counter()

    def turn(self, owner: str, agent: str, context_id: str, text: str) -> dict[str, Any]:
        """The ``room/turn`` params for the next turn, the user's ``text`` included."""
        key = (owner, agent, context_id)
        conversation = self._kept.pop(key, None)
        if conversation is None:
            conversation = _Conversation()
            self._make_room(owner)
            self._owned[owner] += 1
        self._kept[key] = conversation
        conversation.turn += 1
        _keep(conversation, {"role": "user", "content": text})
        return {
            "room_id": f"a2a-{context_id}",
            "turn": conversation.turn,
            "agent_id": agent,
            "system": "",
            "messages": list(conversation.messages),
            "epoch": conversation.epoch,
        }

    def replied(self, owner: str, agent: str, context_id: str, text: str) -> None:
        conversation = self._kept.get((owner, agent, context_id))
        if conversation is not None:
            _keep(conversation, {"role": "assistant", "content": text})

    def _make_room(self, owner: str) -> None:
        """Forget what a new conversation of ``owner`` would put past a bound: the
        owner's own oldest, then (if the whole is full) the oldest of all."""
        if self._owned[owner] >= MAX_CONVERSATIONS_PER_OWNER:
            self._forget(next(key for key in self._kept if key[0] == owner))
        if len(self._kept) >= MAX_CONVERSATIONS:
            self._forget(next(iter(self._kept)))

    def _forget(self, key: tuple[str, str, str]) -> None:
        del self._kept[key]
        self._owned[key[0]] -= 1
        if not self._owned[key[0]]:
            del self._owned[key[0]]


def _keep(conversation: _Conversation, message: dict[str, Any]) -> None:
    """Add ``message``, then drop the oldest past the message and character bounds."""
    messages = conversation.messages
    messages.append(message)
    del messages[:-MAX_TURN_MESSAGES]
    kept = sum(len(m["content"]) for m in messages)
    while kept > MAX_CONVERSATION_CHARS and len(messages) > 1:
        kept -= len(messages.pop(0)["content"])
