"""Streamed replies: the four wire formats, read into text deltas and one final completion.

Every streaming API sends its reply as a sequence of small JSON documents:
OpenAI-compatible servers, Anthropic and Gemini as Server-Sent Events
(``event:``/``data:`` lines, a blank line ending each event), Ollama as
newline-delimited JSON. :class:`LineDecoder` turns the lines of either framing
into ``(event, data)`` pairs; a :class:`StreamReader` per API turns those into
the text they add and knows when the reply is *complete* (OpenAI's
``data: [DONE]`` or a ``finish_reason``, Ollama's ``"done": true``, Anthropic's
``message_stop``, Gemini's ``finishReason``). A stream that ends before that is a
reply cut off mid-stream: :class:`~mesh.providers.HttpProvider` reports it as
:class:`~mesh.providers.ProviderStreamCut`, never as a shorter reply.

All of it is pure (no I/O), so each format is tested line by line.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeAlias

import msgspec

from ._base import Completion, ProviderConfig, Usage

__all__ = [
    "AnthropicStream",
    "Framing",
    "GeminiStream",
    "LineDecoder",
    "OllamaStream",
    "OpenAIStream",
    "StreamReader",
    "TextSink",
]

Framing: TypeAlias = Literal["sse", "ndjson"]
#: Called with each piece of text as it arrives (synchronously: it must not block).
TextSink: TypeAlias = Callable[[str], None]


class StreamFault(Exception):
    """The stream said something went wrong, or sent a document we cannot read."""


class LineDecoder:
    """Lines of one framing in, ``(event name, data)`` pairs out.

    SSE: ``data:`` lines accumulate until a blank line dispatches them joined by
    newlines, under the last ``event:`` name (``message`` by default); comments
    (``:``) and other fields are ignored, as the HTML spec says. NDJSON: every
    non-blank line is one ``("message", line)``.
    """

    def __init__(self, framing: Framing) -> None:
        self.framing = framing
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> Iterator[tuple[str, str]]:
        line = line.rstrip("\r\n")
        if self.framing == "ndjson":
            if line.strip():
                yield "message", line
            return
        if not line:
            yield from self.flush()
            return
        if line.startswith(":"):
            return
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)

    def flush(self) -> Iterator[tuple[str, str]]:
        """The event still buffered when the stream ends without a blank line."""
        if self._data:
            yield self._event or "message", "\n".join(self._data)
        self._event, self._data = "", []


def _document(data: str) -> dict[str, Any]:
    try:
        decoded = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise StreamFault(f"a streamed chunk is not JSON ({exc}): {data[:120]!r}") from None
    if not isinstance(decoded, dict):
        raise StreamFault(f"a streamed chunk is a JSON {type(decoded).__name__}, not an object")
    return decoded


class StreamReader(abc.ABC):
    """One API's streamed documents, folded into text (see the module docstring)."""

    framing: Framing = "sse"
    provider: str

    def __init__(self, config: ProviderConfig) -> None:
        self.config = config
        self.parts: list[str] = []
        self.complete = False
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def feed(self, event: str, data: str) -> str:
        """The text this event adds ("" for none); raises :class:`StreamFault`."""
        piece = self.read(event, data)
        if piece:
            self.parts.append(piece)
        return piece

    @abc.abstractmethod
    def read(self, event: str, data: str) -> str:
        """Update the reader's fields from one event and return its text."""

    def completion(self) -> Completion:
        return Completion(
            text=self.text,
            model=self.model or self.config.model,
            provider=self.provider,
            usage=Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens),
            finish_reason=self.finish_reason,
        )


def _error_of(document: dict[str, Any]) -> str | None:
    error = document.get("error")
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        kind = error.get("type") or error.get("status")
        message = error.get("message", error)
        return f"{kind}: {message}" if isinstance(kind, str) else str(message)
    return None


class OpenAIStream(StreamReader):
    """``data: {chunk}`` with ``choices[0].delta.content``, then ``data: [DONE]``."""

    provider = "openai"

    def read(self, event: str, data: str) -> str:
        if data.strip() == "[DONE]":
            self.complete = True
            return ""
        chunk = _document(data)
        error = _error_of(chunk)
        if error is not None:
            raise StreamFault(f"the server reported an error mid-stream: {error}")
        self.model = chunk.get("model") or self.model
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.input_tokens = usage.get("prompt_tokens", self.input_tokens)
            self.output_tokens = usage.get("completion_tokens", self.output_tokens)
        choices = chunk.get("choices") or []
        if not choices or not isinstance(choices[0], dict):
            return ""
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
            self.complete = True
        delta = choice.get("delta") or {}
        content = delta.get("content") if isinstance(delta, dict) else None
        return content if isinstance(content, str) else ""


class OllamaStream(StreamReader):
    """One JSON object per line with ``message.content``; the last has ``"done": true``."""

    framing = "ndjson"
    provider = "ollama"

    def read(self, event: str, data: str) -> str:
        chunk = _document(data)
        error = _error_of(chunk)
        if error is not None:
            raise StreamFault(f"Ollama reported an error mid-stream: {error}")
        self.model = chunk.get("model") or self.model
        if chunk.get("done"):
            self.complete = True
            self.finish_reason = chunk.get("done_reason") or "stop"
            self.input_tokens = chunk.get("prompt_eval_count")
            self.output_tokens = chunk.get("eval_count")
        message = chunk.get("message") or {}
        content = message.get("content") if isinstance(message, dict) else None
        return content if isinstance(content, str) else ""


class AnthropicStream(StreamReader):
    """Named events: ``content_block_delta`` carries text, ``message_stop`` ends it."""

    provider = "anthropic"

    def read(self, event: str, data: str) -> str:
        if event == "ping":
            return ""
        document = _document(data)
        kind = document.get("type", event)
        if kind == "error":
            raise StreamFault(f"Anthropic reported an error mid-stream: {_error_of(document)}")
        if kind == "message_start":
            message = document.get("message") or {}
            self.model = message.get("model") or self.model
            self.input_tokens = (message.get("usage") or {}).get("input_tokens")
        elif kind == "message_delta":
            self.finish_reason = (document.get("delta") or {}).get("stop_reason")
            self.output_tokens = (document.get("usage") or {}).get("output_tokens")
        elif kind == "message_stop":
            self.complete = True
        elif kind == "content_block_delta":
            delta = document.get("delta") or {}
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                return str(delta["text"])
        return ""


class GeminiStream(StreamReader):
    """``data: {GenerateContentResponse}``; the last candidate carries ``finishReason``."""

    provider = "gemini"

    def read(self, event: str, data: str) -> str:
        document = _document(data)
        error = _error_of(document)
        if error is not None:
            raise StreamFault(f"Gemini reported an error mid-stream: {error}")
        self.model = document.get("modelVersion") or self.model
        usage = document.get("usageMetadata")
        if isinstance(usage, dict):
            self.input_tokens = usage.get("promptTokenCount", self.input_tokens)
            self.output_tokens = usage.get("candidatesTokenCount", self.output_tokens)
        candidates = document.get("candidates") or []
        if not candidates:
            blocked = (document.get("promptFeedback") or {}).get("blockReason")
            if blocked:
                raise StreamFault(f"the prompt was blocked (blockReason={blocked})")
            return ""
        candidate = candidates[0]
        if candidate.get("finishReason"):
            self.finish_reason = candidate["finishReason"]
            self.complete = True
        parts = (candidate.get("content") or {}).get("parts") or []
        return "".join(p["text"] for p in parts if isinstance(p.get("text"), str))
