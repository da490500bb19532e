"""The vocabulary every provider shares: messages, completions, config, the protocol.

``ProviderConfig`` is what an agent manifest embeds (TOML, decoded by msgspec),
so it is frozen and keyword-only and each new field gets a default. A
``Provider`` turns a named-speaker chat into one completion; how each API wants
that chat shaped lives in the provider's own module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypeAlias, runtime_checkable

import msgspec

__all__ = [
    "DEFAULT_API_KEY_ENVS",
    "DEFAULT_BASE_URLS",
    "ChatMessage",
    "Completion",
    "Provider",
    "ProviderConfig",
    "ProviderName",
    "Role",
    "Usage",
]

Role: TypeAlias = Literal["system", "user", "assistant"]
ProviderName: TypeAlias = Literal["ollama", "openai", "anthropic", "gemini", "scripted"]

DEFAULT_BASE_URLS: Mapping[str, str] = {
    "ollama": "http://127.0.0.1:11434",
    "openai": "https://api.openai.com",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}

#: Ollama needs no key by default; the others name the variable their own SDKs read.
DEFAULT_API_KEY_ENVS: Mapping[str, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
}


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One message of a conversation, from the point of view of the agent that will answer.

    ``name`` is the speaker when several participants share the ``user`` role
    (a room with three agents and a person); providers without a name field
    show it as a ``"Name: "`` prefix.
    """

    role: Role
    content: str
    name: str | None = None


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts, when the provider reports them."""

    input_tokens: int | None = None
    output_tokens: int | None = None


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """A provider's answer: the text, and what the provider said about it.

    ``raw`` is the decoded response body, kept for debugging and for fields we
    do not model; it is ``None`` for the scripted provider.
    """

    text: str
    model: str
    provider: str
    usage: Usage = Usage()
    finish_reason: str | None = None
    raw: dict[str, Any] | None = None


class ProviderConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which model to ask and how: the ``[persona.provider]`` table of a manifest.

    ``base_url`` and ``api_key_env`` default per provider (see
    ``DEFAULT_BASE_URLS`` and ``DEFAULT_API_KEY_ENVS``). ``api_key_env = ""``
    means "send no key", for local OpenAI-compatible servers. ``script`` is only
    for the scripted provider. Invalid values raise ``ValueError`` (a
    ``msgspec.ValidationError`` with the field's path when decoded from a file).
    """

    provider: ProviderName
    model: str = ""
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    #: The sampling seed (OpenAI-compatible servers, Ollama, Gemini; Anthropic has none):
    #: the same seed, prompt and settings give the same reply.
    seed: int | None = None
    #: Penalises tokens by how often they already appear, in [-2, 2] (OpenAI-compatible
    #: servers, Ollama, Gemini; Anthropic has none): a small model repeats itself less.
    frequency_penalty: float | None = None
    timeout: float = 60.0
    max_retries: int = 3
    script: tuple[str, ...] = ()
    #: Scripted only: seconds each reply takes, to stand in for a slow model (before the
    #: reply, or spread over its words when it is streamed).
    delay: float = 0.0

    def __post_init__(self) -> None:
        if self.provider != "scripted" and not self.model:
            raise ValueError(f"`model` is required for provider {self.provider!r}")
        if self.provider == "scripted" and not self.script:
            raise ValueError("`script` must hold at least one reply for the scripted provider")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"`base_url` must start with http:// or https://: {self.base_url!r}")
        if self.timeout <= 0:
            raise ValueError(f"`timeout` must be positive, got {self.timeout}")
        if not 0.0 <= self.delay < float("inf"):
            raise ValueError(f"`delay` must be a finite number of seconds >= 0, got {self.delay}")
        if self.max_retries < 0:
            raise ValueError(f"`max_retries` must be >= 0, got {self.max_retries}")
        if self.frequency_penalty is not None and not -2.0 <= self.frequency_penalty <= 2.0:
            raise ValueError(
                f"`frequency_penalty` must be between -2 and 2, got {self.frequency_penalty}"
            )
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"`max_tokens` must be positive, got {self.max_tokens}")

    def for_call(self, *, max_tokens: int | None = None, seed: int | None = None) -> Self:
        """This config with one call's reply budget (the smaller wins) and seed, if given."""
        changes: dict[str, int] = {}
        if max_tokens is not None:
            changes["max_tokens"] = min(max_tokens, self.max_tokens or max_tokens)
        if seed is not None:
            changes["seed"] = seed
        return msgspec.structs.replace(self, **changes) if changes else self

    def resolved_base_url(self) -> str:
        """``base_url``, or the provider's public endpoint, without a trailing slash."""
        url = self.base_url or DEFAULT_BASE_URLS.get(self.provider, "")
        return url.rstrip("/")

    def resolved_api_key_env(self) -> str | None:
        """The env var holding the key, or ``None`` when no key is sent."""
        if self.api_key_env is not None:
            return self.api_key_env or None
        return DEFAULT_API_KEY_ENVS.get(self.provider)


@runtime_checkable
class Provider(Protocol):
    """Anything that answers a chat: an HTTP provider, the scripted one, a test double."""

    @property
    def config(self) -> ProviderConfig: ...

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        system: str | None = None,
        on_delta: Callable[[str], None] | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> Completion:
        """Answer ``messages`` (oldest first) as the assistant, under ``system``.

        With ``on_delta`` the reply is streamed where the API can: each piece of
        text is passed to it as it arrives, and the returned completion holds the
        whole text. A stream cut off before its end raises ``ProviderStreamCut``.
        ``max_tokens`` and ``seed`` are this call's (a room's reply budget and turn
        seed): the smaller budget of the call's and the config's wins.
        """
        ...

    async def aclose(self) -> None:
        """Release the HTTP client if the provider made its own. Idempotent."""
        ...


class ProviderBase:
    """What the concrete providers share: ``config``, ``async with``, and ``aclose``."""

    def __init__(self, config: ProviderConfig) -> None:
        self._config = config

    @property
    def config(self) -> ProviderConfig:
        return self._config

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        config = self._config
        return f"<{type(self).__name__} {config.provider} model={config.model!r}>"
