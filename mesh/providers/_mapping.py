"""Shaping a named-speaker chat for APIs that know only ``user`` and ``assistant``.

A room hands a provider the conversation from the speaking agent's perspective:
its own turns as ``assistant``, everyone else's as ``user`` with a ``name``.
These pure functions make that fit each API:

* the speaker's name becomes a ``"Name: "`` prefix on ``user`` turns (the agent's
  own turns are not prefixed, or the model learns to sign its replies);
* for the strict APIs (Anthropic, Gemini), ``system`` messages move into the
  top-level system prompt, blank turns are dropped, consecutive turns of one
  role are merged, and a conversation that would open with the assistant (or
  be empty) gets a short ``user`` opener, because both APIs insist on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from ._base import ChatMessage

__all__ = [
    "CONVERSATION_START",
    "TURN_SEPARATOR",
    "Turn",
    "alternating_turns",
    "hoist_system",
    "speaker_text",
]

#: Sent as the first user turn when the strict APIs would otherwise get none.
CONVERSATION_START = "(The conversation begins.)"
#: Joins consecutive same-role messages into one turn.
TURN_SEPARATOR = "\n\n"

Turn: TypeAlias = tuple[Literal["user", "assistant"], str]


def speaker_text(message: ChatMessage) -> str:
    """The message's content, prefixed ``"Name: "`` when a named user spoke it.

    A content that already starts with the prefix is left alone, so a caller
    that prefixes for itself does not get ``"Ann: Ann: hi"``.
    """
    name = (message.name or "").strip()
    if message.role != "user" or not name:
        return message.content
    prefix = f"{name}:"
    if message.content.startswith(prefix):
        return message.content
    return f"{prefix} {message.content}"


def hoist_system(
    messages: Sequence[ChatMessage], system: str | None
) -> tuple[str | None, list[ChatMessage]]:
    """Split off every ``system`` text (``system`` first, then in order) from the chat."""
    parts = [system] if system else []
    rest: list[ChatMessage] = []
    for message in messages:
        if message.role == "system":
            if message.content.strip():
                parts.append(message.content)
        else:
            rest.append(message)
    return (TURN_SEPARATOR.join(parts) if parts else None), rest


def alternating_turns(messages: Sequence[ChatMessage]) -> list[Turn]:
    """User/assistant turns that alternate and open with ``user``.

    ``system`` messages must already be hoisted; any left are treated as user
    text so that nothing is silently lost.
    """
    turns: list[Turn] = []
    for message in messages:
        text = speaker_text(message)
        if not text.strip():
            continue
        role: Literal["user", "assistant"] = "assistant" if message.role == "assistant" else "user"
        if turns and turns[-1][0] == role:
            turns[-1] = (role, turns[-1][1] + TURN_SEPARATOR + text)
        else:
            turns.append((role, text))
    if not turns or turns[0][0] != "user":
        turns.insert(0, ("user", CONVERSATION_START))
    return turns
