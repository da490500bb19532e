"""Ollama's native chat: ``POST {base}/api/chat`` with ``"stream": false``.

Ollama answers one JSON object when streaming is off: ``message.content`` holds
the reply, ``done_reason`` why it stopped, ``prompt_eval_count`` and
``eval_count`` the token counts. Sampling settings travel in ``options``
(``temperature``, and ``num_predict`` for the length limit). Messages have no
``name`` field, so named speakers become ``"Name: "`` prefixes. No key is sent
unless ``api_key_env`` names one (for an Ollama behind an authenticating proxy),
in which case it goes in ``Authorization: Bearer``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ._base import ChatMessage, Completion, ProviderConfig, Usage
from ._http import BodyError, HttpProvider, join_url
from ._mapping import speaker_text
from ._stream import OllamaStream

__all__ = ["OllamaProvider", "build_request", "parse_response"]


def build_request(
    config: ProviderConfig, messages: Sequence[ChatMessage], system: str | None
) -> dict[str, Any]:
    """The JSON body: ``system`` first, then the chat in order, streaming off."""
    wire = [{"role": "system", "content": system}] if system else []
    wire.extend({"role": m.role, "content": speaker_text(m)} for m in messages)
    body: dict[str, Any] = {"model": config.model, "messages": wire, "stream": False}
    options: dict[str, Any] = {}
    if config.temperature is not None:
        options["temperature"] = config.temperature
    if config.max_tokens is not None:
        options["num_predict"] = config.max_tokens
    if config.seed is not None:
        options["seed"] = config.seed
    if config.frequency_penalty is not None:
        options["frequency_penalty"] = config.frequency_penalty
    if options:
        body["options"] = options
    return body


class _Message(msgspec.Struct):
    content: str


class _Response(msgspec.Struct):
    message: _Message
    model: str | None = None
    done_reason: str | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None


def parse_response(config: ProviderConfig, data: dict[str, Any]) -> Completion:
    """The reply in ``message.content``; an ``error`` field in a 200 is reported as such."""
    if "message" not in data and isinstance(data.get("error"), str):
        raise BodyError(f"Ollama reported an error: {data['error']}")
    response = msgspec.convert(data, _Response)
    return Completion(
        text=response.message.content,
        model=response.model or config.model,
        provider="ollama",
        usage=Usage(input_tokens=response.prompt_eval_count, output_tokens=response.eval_count),
        finish_reason=response.done_reason,
        raw=data,
    )


class OllamaProvider(HttpProvider):
    """A local (or remote) Ollama server."""

    name = "ollama"
    stream_reader = OllamaStream

    def endpoint(self) -> str:
        return join_url(self.config.resolved_base_url(), "/api/chat")

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def build_body(
        self, messages: Sequence[ChatMessage], system: str | None, config: ProviderConfig
    ) -> dict[str, Any]:
        return build_request(config, messages, system)

    def parse_body(self, data: dict[str, Any]) -> Completion:
        return parse_response(self.config, data)
