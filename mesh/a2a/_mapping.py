"""How an A2A message becomes a mesh call, and a mesh result an A2A artifact.

A mesh agent has tools; an A2A agent takes messages. The rule (docs/a2a.md):

1. A **data part** ``{"tool": NAME, "arguments": {...}}`` calls tool ``NAME``
   with those arguments. This always works, and is what the card's skills say
   (each tool is a skill whose id is the tool's name).
2. A data part that is any other object, to an agent with **one tool**, is that
   tool's arguments.
3. **Text** (every text part, joined by newlines):
   - to an agent that names its **text entry** (a tool; the ``text_entry`` of its
     ``agent/info``, or of its manifest's ``[metadata]``), it is that tool's one
     string argument, beside any data object's fields;
   - to a *chat* agent (a persona: it takes ``room/turn``) it is the next turn of
     a conversation, one per ``contextId``, whose reply streams as it is written;
   - to an agent with one tool that takes one string argument, it is that argument.

Numbers follow JSON Schema's rules: ``4.0`` is an integer, so where a tool's
schema says ``integer`` an integral float (what protobuf's ``Struct`` makes of
every number a client sends) becomes an ``int``.

Anything else is refused with ``-32602`` naming the tools and the data-part form.
What a result becomes is ``mesh.a2a._content``'s to say.
"""

from __future__ import annotations

import uuid
from collections import Counter, OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "CHAT_CAPABILITY",
    "TEXT_ENTRY",
    "Conversations",
    "Plan",
    "PlanError",
    "plan_call",
    "unsupported_media",
]

#: Agents that take room turns say so in the registry (persona agents do).
CHAT_CAPABILITY: Final = "chat"
ROOM_TURN: Final = "room/turn"
#: Where an agent names the tool plain text goes to (its agent/info, or its manifest's
#: metadata): what lets a text-only client call an agent of many tools.
TEXT_ENTRY: Final = "text_entry"
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


def _text_argument(tool: Mapping[str, Any]) -> str | None:
    """The string argument text goes to: the tool's only one, else its only required one."""
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return None
    props = schema["properties"]
    strings = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
    required = [r for r in schema.get("required") or () if r in strings]
    chosen = strings if len(strings) == 1 else required
    return str(chosen[0]) if len(chosen) == 1 else None


def _how(agent: str, tools: list[Mapping[str, Any]]) -> str:
    names = ", ".join(str(t.get("name")) for t in tools) or "none"
    return (
        f'send a data part {{"tool": NAME, "arguments": {{...}}}} naming one of '
        f"{agent!r}'s tools ({names})"
    )


def plan_call(
    agent: str,
    message: Mapping[str, Any],
    tools: list[Mapping[str, Any]],
    chat: bool,
    text_entry: str | None = None,
) -> Plan:
    """What ``message`` asks of ``agent`` (see the module docstring)."""
    plan = _plan(agent, message["parts"], tools, chat, text_entry)
    if plan.tool is None:
        return plan
    tool = next((t for t in tools if t.get("name") == plan.tool), None)
    schema = tool.get("inputSchema") if tool is not None else None
    return Plan(plan.tool, whole_numbers(plan.arguments, schema))


def _plan(
    agent: str,
    parts: list[dict[str, Any]],
    tools: list[Mapping[str, Any]],
    chat: bool,
    text_entry: str | None,
) -> Plan:
    for part in parts:
        data = part.get("data")
        if isinstance(data, dict) and isinstance(data.get("tool"), str):
            arguments = data.get("arguments", {})
            if not isinstance(arguments, dict):
                raise PlanError(f"`arguments` of tool {data['tool']!r} must be an object")
            return Plan(data["tool"], dict(arguments))
    objects = [p["data"] for p in parts if isinstance(p.get("data"), dict)]
    text = _texts(parts)
    if text_entry and (text or objects):
        return _entry(agent, tools, text_entry, text, objects)
    if objects and len(tools) == 1:
        return Plan(str(tools[0].get("name")), dict(objects[0]))
    if text and chat:
        return Plan(None, text=text)
    if text and len(tools) == 1:
        argument = _one_string_argument(tools[0])
        if argument is not None:
            return Plan(str(tools[0].get("name")), {argument: text})
    raise PlanError(f"the message does not say which tool to call: {_how(agent, tools)}")


def _entry(
    agent: str,
    tools: list[Mapping[str, Any]],
    entry: str,
    text: str,
    objects: list[dict[str, Any]],
) -> Plan:
    """The call of ``agent``'s text entry: the data object's fields, and the text as its
    one string argument."""
    tool = next((t for t in tools if t.get("name") == entry), None)
    if tool is None:
        raise PlanError(
            f"{agent!r} names {entry!r} as its {TEXT_ENTRY}, which is none of its tools"
        )
    arguments = dict(objects[0]) if objects else {}
    if text:
        argument = _text_argument(tool)
        if argument is None:
            raise PlanError(
                f"{agent!r}'s {TEXT_ENTRY} {entry!r} takes no single string argument for text:"
                f" {_how(agent, tools)}"
            )
        arguments.setdefault(argument, text)
    return Plan(entry, arguments)


def _is_integer(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "integer" or (isinstance(kind, list) and "integer" in kind):
        return True
    branches = [*(schema.get("anyOf") or ()), *(schema.get("oneOf") or ())]
    return any(isinstance(b, Mapping) and _is_integer(b) for b in branches)


def whole_numbers(value: Any, schema: Any) -> Any:
    """``value`` with each integral float an ``int`` where ``schema`` says ``integer``
    (as JSON Schema counts ``4.0``); anything else as it is, for the tool to judge."""
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, float) and value.is_integer() and _is_integer(schema):
        return int(value)
    properties = schema.get("properties")
    if isinstance(value, dict) and isinstance(properties, Mapping):
        return {k: whole_numbers(v, properties.get(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v, schema.get("items")) for v in value]
    return value


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
