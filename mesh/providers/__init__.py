"""LLM chat providers for persona agents: Ollama, OpenAI-compatible, Anthropic, Gemini, scripted.

A persona's manifest holds a ``ProviderConfig``; ``create_provider`` (or
``open_provider``) turns it into a ``Provider`` whose ``complete()`` answers a
named-speaker chat, streamed piece by piece when given ``on_delta``. The HTTP
providers retry 429/5xx/dropped connections with jittered backoff, honour
``Retry-After``, and raise ``ProviderError`` subclasses that name the provider,
model, URL and status, never the key. The scripted provider runs rooms offline
and deterministically. See ``docs/providers.md``.
"""

from mesh._public import publish

from ._anthropic import AnthropicProvider
from ._base import ChatMessage, Completion, Provider, ProviderConfig, ProviderName, Role, Usage
from ._errors import (
    ProviderAuthError,
    ProviderError,
    ProviderRateLimited,
    ProviderResponseError,
    ProviderStatusError,
    ProviderStreamCut,
    ProviderTimeout,
    ProviderUnreachable,
)
from ._factory import create_provider, open_provider
from ._gemini import GeminiProvider
from ._http import HttpProvider
from ._ollama import OllamaProvider
from ._openai import OpenAIProvider
from ._retry import RetryPolicy, backoff_schedule, parse_retry_after
from ._scripted import ScriptedCall, ScriptedProvider

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


publish(globals(), __all__)
