"""LLM chat providers for persona agents: Ollama, OpenAI-compatible, Anthropic, Gemini, scripted.

A persona's manifest holds a ``ProviderConfig``; ``create_provider`` (or
``open_provider``) turns it into a ``Provider`` whose ``complete()`` answers a
named-speaker chat, streamed piece by piece when given ``on_delta``. The HTTP
providers retry 429/5xx/dropped connections with jittered backoff, honour
``Retry-After``, and raise ``ProviderError`` subclasses that name the provider,
model, URL and status, never the key. The scripted provider runs rooms offline
and deterministically. See ``docs/providers.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mesh._public import lazy_names

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
    from mesh.providers._anthropic import AnthropicProvider
    from mesh.providers._base import (
        ChatMessage,
        Completion,
        Provider,
        ProviderConfig,
        ProviderName,
        Role,
        Usage,
    )
    from mesh.providers._errors import (
        ProviderAuthError,
        ProviderError,
        ProviderRateLimited,
        ProviderResponseError,
        ProviderStatusError,
        ProviderStreamCut,
        ProviderTimeout,
        ProviderUnreachable,
    )
    from mesh.providers._factory import create_provider, open_provider
    from mesh.providers._gemini import GeminiProvider
    from mesh.providers._http import HttpProvider
    from mesh.providers._ollama import OllamaProvider
    from mesh.providers._openai import OpenAIProvider
    from mesh.providers._retry import RetryPolicy, backoff_schedule, parse_retry_after
    from mesh.providers._scripted import ScriptedCall, ScriptedProvider

__all__ = [
    "AnthropicProvider",
    "ChatMessage",
    "Completion",
    "GeminiProvider",
    "HttpProvider",
    "OllamaProvider",
    "OpenAIProvider",
    "Provider",
    "ProviderAuthError",
    "ProviderConfig",
    "ProviderError",
    "ProviderName",
    "ProviderRateLimited",
    "ProviderResponseError",
    "ProviderStatusError",
    "ProviderStreamCut",
    "ProviderTimeout",
    "ProviderUnreachable",
    "RetryPolicy",
    "Role",
    "ScriptedCall",
    "ScriptedProvider",
    "Usage",
    "backoff_schedule",
    "create_provider",
    "open_provider",
    "parse_retry_after",
]

#: Where each public name lives: imported on first use (``mesh._public.lazy_names``).
_WHERE: dict[str, str] = {
    "AnthropicProvider": "mesh.providers._anthropic",
    "ChatMessage": "mesh.providers._base",
    "Completion": "mesh.providers._base",
    "Provider": "mesh.providers._base",
    "ProviderConfig": "mesh.providers._base",
    "ProviderName": "mesh.providers._base",
    "Role": "mesh.providers._base",
    "Usage": "mesh.providers._base",
    "ProviderAuthError": "mesh.providers._errors",
    "ProviderError": "mesh.providers._errors",
    "ProviderRateLimited": "mesh.providers._errors",
    "ProviderResponseError": "mesh.providers._errors",
    "ProviderStatusError": "mesh.providers._errors",
    "ProviderStreamCut": "mesh.providers._errors",
    "ProviderTimeout": "mesh.providers._errors",
    "ProviderUnreachable": "mesh.providers._errors",
    "create_provider": "mesh.providers._factory",
    "open_provider": "mesh.providers._factory",
    "GeminiProvider": "mesh.providers._gemini",
    "HttpProvider": "mesh.providers._http",
    "OllamaProvider": "mesh.providers._ollama",
    "OpenAIProvider": "mesh.providers._openai",
    "RetryPolicy": "mesh.providers._retry",
    "backoff_schedule": "mesh.providers._retry",
    "parse_retry_after": "mesh.providers._retry",
    "ScriptedCall": "mesh.providers._scripted",
    "ScriptedProvider": "mesh.providers._scripted",
}
__getattr__, __dir__ = lazy_names(globals(), _WHERE)
