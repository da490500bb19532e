"""Anthropic's Messages API: ``POST {base}/v1/messages``.

Headers: ``x-api-key`` and ``anthropic-version: 2023-06-01``. The system prompt
is a top-level ``system`` string, not a message; ``messages`` must alternate
``user``/``assistant`` and open with ``user`` (see ``_mapping``), and
``max_tokens`` is required, so it defaults to ``DEFAULT_MAX_TOKENS``. The reply
is a list of content blocks; the ``text`` blocks are joined. Errors arrive as
``{"type": "error", "error": {"type": ..., "message": ...}}``; 529 means
"overloaded" and is retried like any 5xx.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ._base import ChatMessage, Completion, ProviderConfig, Usage
from ._http import BodyError, HttpProvider, join_url
from ._mapping import alternating_turns, hoist_system
from ._stream import AnthropicStream

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "AnthropicProvider",
    "build_request",
    "parse_response",
]

ANTHROPIC_VERSION = "2023-06-01"
#: The API will not answer without a limit; 1024 tokens is a long turn in a room.
DEFAULT_MAX_TOKENS = 1024


def build_request(
    config: ProviderConfig, messages: Sequence[ChatMessage], system: str | None
) -> dict[str, Any]:
    """The JSON body: hoisted ``system``, alternating turns, required ``max_tokens``."""
    system_text, chat = hoist_system(messages, system)
    body: dict[str, Any] = {
        "model": config.model,
        "max_tokens": config.max_tokens or DEFAULT_MAX_TOKENS,
        "messages": [{"role": role, "content": text} for role, text in alternating_turns(chat)],
    }
    if system_text:
        body["system"] = system_text
    if config.temperature is not None:
        body["temperature"] = config.temperature
    return body


class _Block(msgspec.Struct):
    type: str
    text: str | None = None


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None


class _Response(msgspec.Struct):
    content: list[_Block]
    model: str | None = None
    stop_reason: str | None = None
    usage: _Usage | None = None


def parse_response(config: ProviderConfig, data: dict[str, Any]) -> Completion:
    """The joined ``text`` blocks; raises if there are none."""
    response = msgspec.convert(data, _Response)
    texts = [block.text for block in response.content if block.type == "text" and block.text]
    if not texts:
        kinds = [block.type for block in response.content]
        raise BodyError(
            f"`content` has no text block (blocks: {kinds}; stop_reason={response.stop_reason})"
        )
    usage = response.usage or _Usage()
    return Completion(
        text="".join(texts),
        model=response.model or config.model,
        provider="anthropic",
        usage=Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
        finish_reason=response.stop_reason,
        raw=data,
    )


class AnthropicProvider(HttpProvider):
    """Claude models through the Messages API."""

    name = "anthropic"
    stream_reader = AnthropicStream

    def endpoint(self) -> str:
        return join_url(self.config.resolved_base_url(), "/v1/messages")

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def build_body(
        self, messages: Sequence[ChatMessage], system: str | None, config: ProviderConfig
    ) -> dict[str, Any]:
        return build_request(config, messages, system)

    def parse_body(self, data: dict[str, Any]) -> Completion:
        return parse_response(self.config, data)
