"""``create_provider``: a config in, the right provider out.

The API key is read here, at construction, so a missing variable is reported
when the agent starts rather than at its first turn.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ._base import Provider, ProviderConfig
from ._scripted import ScriptedProvider

if TYPE_CHECKING:
    import httpx

    from ._http import HttpProvider, Sleep

__all__ = ["create_provider", "open_provider"]

#: Each HTTP provider's module and class, imported when a config names it: a scripted
#: persona (every offline room) never loads httpx and the four HTTP clients.
_HTTP_PROVIDERS: Mapping[str, tuple[str, str]] = {
    "ollama": ("._ollama", "OllamaProvider"),
    "openai": ("._openai", "OpenAIProvider"),
    "anthropic": ("._anthropic", "AnthropicProvider"),
    "gemini": ("._gemini", "GeminiProvider"),
}


def create_provider(
    config: ProviderConfig,
    *,
    http_client: httpx.AsyncClient | None = None,
    env: Mapping[str, str] | None = None,
    sleep: Sleep | None = None,
    random: Callable[[], float] | None = None,
) -> Provider:
    """Build the provider ``config.provider`` names.

    ``http_client`` is shared and left open by ``aclose()``; without one the
    provider makes and owns its own. ``env`` replaces ``os.environ`` for the key
    lookup. ``sleep`` (default ``anyio.sleep``) and ``random`` (default
    ``random.random``) drive the retry waits; tests pass recorders. Raises
    ``ProviderAuthError`` when the key's env var is unset.
    """
    if config.provider == "scripted":
        return ScriptedProvider(config)
    module, name = _HTTP_PROVIDERS[config.provider]
    kind: type[HttpProvider] = getattr(importlib.import_module(module, __package__), name)
    return kind(config, http_client=http_client, env=env, sleep=sleep, random=random)


@asynccontextmanager
async def open_provider(
    config: ProviderConfig,
    *,
    http_client: httpx.AsyncClient | None = None,
    env: Mapping[str, str] | None = None,
    sleep: Sleep | None = None,
    random: Callable[[], float] | None = None,
) -> AsyncIterator[Provider]:
    """``create_provider`` as an ``async with``: the provider is closed on exit."""
    provider = create_provider(config, http_client=http_client, env=env, sleep=sleep, random=random)
    try:
        yield provider
    finally:
        await provider.aclose()
