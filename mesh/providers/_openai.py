"""OpenAI-compatible chat: ``POST {base}/v1/chat/completions``.

Speaks to OpenAI itself and to the servers that copy its API (vLLM, llama.cpp's
server, LM Studio, Ollama's ``/v1``). The key goes in ``Authorization: Bearer``;
a local server that wants none is configured with ``api_key_env = ""``.

Names: OpenAI accepts a ``name`` per message (``^[a-zA-Z0-9_-]{1,64}$``), but
most compatible servers drop it before the chat template, so the speaker is
also written as a ``"Name: "`` prefix; the two agree and cost a few tokens.
Length is sent as ``max_tokens``, which every compatible server understands.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from ._base import ChatMessage, Completion, ProviderConfig, Usage
from ._http import BodyError, HttpProvider, join_url
from ._mapping import speaker_text
from ._stream import OpenAIStream

__all__ = ["OpenAIProvider", "build_request", "parse_response", "wire_name"]

_NAME_FORBIDDEN = re.compile(r"[^a-zA-Z0-9_-]+")
_MAX_NAME = 64


def wire_name(name: str) -> str | None:
    """``name`` made to fit OpenAI's pattern (other characters become ``_``)."""
    cleaned = _NAME_FORBIDDEN.sub("_", name.strip()).strip("_")[:_MAX_NAME]
    return cleaned or None


def _wire_message(message: ChatMessage) -> dict[str, str]:
    wire = {"role": message.role, "content": speaker_text(message)}
    name = wire_name(message.name) if message.name and message.role == "user" else None
    if name:
        wire["name"] = name
    return wire


def build_request(
    config: ProviderConfig, messages: Sequence[ChatMessage], system: str | None
) -> dict[str, Any]:
    """The JSON body: ``system`` as the first message, the chat after it in order."""
    wire = [{"role": "system", "content": system}] if system else []
    wire.extend(_wire_message(message) for message in messages)
    body: dict[str, Any] = {"model": config.model, "messages": wire}
    if config.temperature is not None:
        body["temperature"] = config.temperature
    if config.max_tokens is not None:
        body["max_tokens"] = config.max_tokens
    if config.seed is not None:
        body["seed"] = config.seed
    if config.frequency_penalty is not None:
        body["frequency_penalty"] = config.frequency_penalty
    return body


class _Message(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Response(msgspec.Struct):
    choices: list[_Choice]
    model: str | None = None
    usage: _Usage | None = None


def parse_response(config: ProviderConfig, data: dict[str, Any]) -> Completion:
    """The first choice's text; raises ``BodyError``/``ValidationError`` naming the gap."""
    response = msgspec.convert(data, _Response)
    if not response.choices:
        raise BodyError("`choices` is empty")
    choice = response.choices[0]
    if choice.message.content is None:
        why = f"refusal: {choice.message.refusal}" if choice.message.refusal else "no content"
        raise BodyError(
            f"`choices[0].message.content` is null ({why}; finish_reason={choice.finish_reason})"
        )
    usage = response.usage or _Usage()
    return Completion(
        text=choice.message.content,
        model=response.model or config.model,
        provider="openai",
        usage=Usage(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens),
        finish_reason=choice.finish_reason,
        raw=data,
    )


class OpenAIProvider(HttpProvider):
    """OpenAI or any server with an OpenAI-compatible ``/v1/chat/completions``."""

    name = "openai"
    stream_reader = OpenAIStream

    def endpoint(self) -> str:
        return join_url(self.config.resolved_base_url(), "/v1/chat/completions")

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def build_body(
        self, messages: Sequence[ChatMessage], system: str | None, config: ProviderConfig
    ) -> dict[str, Any]:
        return build_request(config, messages, system)

    def parse_body(self, data: dict[str, Any]) -> Completion:
        return parse_response(self.config, data)

    def stream_body(
        self, messages: Sequence[ChatMessage], system: str | None, config: ProviderConfig
    ) -> dict[str, Any]:
        # include_usage: the token counts come in one last chunk before [DONE].
        body = super().stream_body(messages, system, config)
        return {**body, "stream_options": {"include_usage": True}}
