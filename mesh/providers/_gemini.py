"""Google's Gemini API: ``POST {base}/v1beta/models/{model}:generateContent``.

Streamed: ``:streamGenerateContent?alt=sse``, each event a partial response.
The key goes in the ``x-goog-api-key`` header (never the ``?key=`` query, which
would put it in every URL we log). ``contents`` are turns with role ``user`` or
``model`` and a list of ``parts`` (``{"text": ...}``); like Anthropic they must
alternate and open with ``user``. The system prompt is ``systemInstruction``;
``temperature`` and ``maxOutputTokens`` live in ``generationConfig``. The reply
is ``candidates[0].content.parts[*].text``, with ``finishReason`` and
``usageMetadata``. A rejected key is a 400 ``INVALID_ARGUMENT`` ("API key not
valid"), and a 429 may carry its wait as a ``RetryInfo.retryDelay`` in the body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import msgspec

from ._base import ChatMessage, Completion, ProviderConfig, Usage
from ._http import BodyError, HttpProvider, join_url
from ._mapping import alternating_turns, hoist_system
from ._retry import parse_retry_after
from ._stream import GeminiStream

__all__ = ["GeminiProvider", "build_request", "parse_response", "retry_delay_from_body"]

_ROLES = {"user": "user", "assistant": "model"}


def build_request(
    config: ProviderConfig, messages: Sequence[ChatMessage], system: str | None
) -> dict[str, Any]:
    """The JSON body: ``contents`` of alternating turns, ``systemInstruction``, settings."""
    system_text, chat = hoist_system(messages, system)
    body: dict[str, Any] = {
        "contents": [
            {"role": _ROLES[role], "parts": [{"text": text}]}
            for role, text in alternating_turns(chat)
        ]
    }
    if system_text:
        body["systemInstruction"] = {"parts": [{"text": system_text}]}
    generation: dict[str, Any] = {}
    if config.temperature is not None:
        generation["temperature"] = config.temperature
    if config.max_tokens is not None:
        generation["maxOutputTokens"] = config.max_tokens
    if config.seed is not None:
        generation["seed"] = config.seed
    if config.frequency_penalty is not None:
        generation["frequencyPenalty"] = config.frequency_penalty
    if generation:
        body["generationConfig"] = generation
    return body


class _Part(msgspec.Struct):
    text: str | None = None


class _Content(msgspec.Struct):
    parts: list[_Part] = []


class _Candidate(msgspec.Struct, rename="camel"):
    content: _Content | None = None
    finish_reason: str | None = None


class _PromptFeedback(msgspec.Struct, rename="camel"):
    block_reason: str | None = None


class _UsageMetadata(msgspec.Struct, rename="camel"):
    prompt_token_count: int | None = None
    candidates_token_count: int | None = None


class _Response(msgspec.Struct, rename="camel"):
    candidates: list[_Candidate] = []
    prompt_feedback: _PromptFeedback | None = None
    usage_metadata: _UsageMetadata | None = None
    model_version: str | None = None


def parse_response(config: ProviderConfig, data: dict[str, Any]) -> Completion:
    """The first candidate's joined text parts; a blocked prompt is reported as such."""
    response = msgspec.convert(data, _Response)
    if not response.candidates:
        feedback = response.prompt_feedback
        if feedback is not None and feedback.block_reason:
            raise BodyError(f"the prompt was blocked (blockReason={feedback.block_reason})")
        raise BodyError("`candidates` is missing or empty")
    candidate = response.candidates[0]
    parts = candidate.content.parts if candidate.content else []
    texts = [part.text for part in parts if part.text]
    if not texts:
        raise BodyError(
            f"`candidates[0].content.parts` has no text (finishReason={candidate.finish_reason})"
        )
    usage = response.usage_metadata or _UsageMetadata()
    return Completion(
        text="".join(texts),
        model=response.model_version or config.model,
        provider="gemini",
        usage=Usage(
            input_tokens=usage.prompt_token_count, output_tokens=usage.candidates_token_count
        ),
        finish_reason=candidate.finish_reason,
        raw=data,
    )


def retry_delay_from_body(content: bytes) -> float | None:
    """Seconds from a ``google.rpc.RetryInfo`` detail (``"retryDelay": "22s"``), if any."""
    try:
        data = msgspec.json.decode(content)
    except msgspec.DecodeError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, dict) or not str(detail.get("@type", "")).endswith("RetryInfo"):
            continue
        delay = detail.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            return parse_retry_after(delay[:-1])
    return None


class GeminiProvider(HttpProvider):
    """Gemini models through the Generative Language API."""

    name = "gemini"
    stream_reader = GeminiStream

    def endpoint(self) -> str:
        model = self.config.model.removeprefix("models/")
        path = f"/v1beta/models/{quote(model, safe='')}:generateContent"
        return join_url(self.config.resolved_base_url(), path)

    def stream_endpoint(self) -> str:
        # The streaming method, with SSE framing (without ``alt=sse`` it sends one JSON array).
        return self.endpoint().replace(":generateContent", ":streamGenerateContent") + "?alt=sse"

    def stream_body(
        self, messages: Sequence[ChatMessage], system: str | None, config: ProviderConfig
    ) -> dict[str, Any]:
        return self.build_body(messages, system, config)

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": api_key} if api_key else {}

    def build_body(
        self, messages: Sequence[ChatMessage], system: str | None, config: ProviderConfig
    ) -> dict[str, Any]:
        return build_request(config, messages, system)

    def parse_body(self, data: dict[str, Any]) -> Completion:
        return parse_response(self.config, data)

    def is_auth_failure(self, status: int, detail: str | None) -> bool:
        rejected_key = status == 400 and detail is not None and "API key not valid" in detail
        return rejected_key or super().is_auth_failure(status, detail)

    def body_retry_after(self, content: bytes) -> float | None:
        return retry_delay_from_body(content)
