"""The errors an LLM provider raises, and how they describe themselves.

::

    MeshError
    └── ProviderError             anything that went wrong talking to a model
        ├── ProviderUnreachable   no connection (refused, reset, DNS) after the retries
        ├── ProviderTimeout       an httpx timeout (connect, read, write, pool)
        ├── ProviderAuthError     the key's env var is missing, or the provider refused the key
        ├── ProviderRateLimited   429 after the retries; ``retry_after`` says what it last asked
        ├── ProviderStatusError   any other error status (4xx, or 5xx after the retries)
        ├── ProviderResponseError a success status with a body we cannot use
        └── ProviderStreamCut     a streamed reply that stopped before it was complete

Every error names the provider, the model and the URL (never a key: the URL
carries none, and a key that a provider echoes back is redacted before it gets
here), plus the HTTP status and the provider's own message when there is one.

A ``ProviderError`` is a :class:`~mesh.MeshError` with code ``-32000`` (the
handler failed): to whoever called the persona agent, a model that could not be
reached is a tool that failed, not a call that timed out or credentials of
theirs that were refused, so every subclass keeps that one code.
"""

from __future__ import annotations

from mesh._errors import ErrorCode, MeshError

__all__ = [
    "ProviderAuthError",
    "ProviderError",
    "ProviderRateLimited",
    "ProviderResponseError",
    "ProviderStatusError",
    "ProviderStreamCut",
    "ProviderTimeout",
    "ProviderUnreachable",
]


class ProviderError(MeshError):
    """Base class: a chat completion could not be had from a provider.

    ``reason`` says what went wrong in words; the other fields are the evidence
    (``status`` and ``detail`` only when the provider answered).
    """

    default_code = ErrorCode.TOOL_ERROR

    def __init__(
        self,
        reason: str,
        *,
        provider: str,
        model: str,
        url: str | None = None,
        status: int | None = None,
        detail: str | None = None,
        attempts: int = 1,
    ) -> None:
        self.reason = reason
        self.provider = provider
        self.model = model
        self.url = url
        self.status = status
        self.detail = detail
        self.attempts = attempts
        super().__init__(self.describe())

    def describe(self) -> str:
        where = f"{self.provider} model {self.model!r}"
        if self.url:
            where += f" at {self.url}"
        text = f"{where}: {self.reason}"
        if self.status is not None:
            text += f" (HTTP {self.status})"
        if self.detail:
            text += f": {self.detail}"
        if self.attempts > 1:
            text += f" [after {self.attempts} attempts]"
        return text


class ProviderUnreachable(ProviderError):
    """No connection to the provider: refused, reset, or dropped mid-request."""


class ProviderTimeout(ProviderError):
    """The provider did not connect or answer within the configured timeout."""


class ProviderAuthError(ProviderError):
    """The API key is missing from the environment or was refused.

    ``env_var`` names the variable the key is (or should be) read from.
    """

    def __init__(
        self,
        reason: str,
        *,
        provider: str,
        model: str,
        env_var: str | None,
        url: str | None = None,
        status: int | None = None,
        detail: str | None = None,
    ) -> None:
        self.env_var = env_var
        super().__init__(
            reason, provider=provider, model=model, url=url, status=status, detail=detail
        )


class ProviderRateLimited(ProviderError):
    """The provider kept answering 429; ``retry_after`` is its last requested wait."""

    def __init__(
        self,
        reason: str,
        *,
        provider: str,
        model: str,
        retry_after: float | None,
        url: str | None = None,
        status: int | None = None,
        detail: str | None = None,
        attempts: int = 1,
    ) -> None:
        self.retry_after = retry_after
        super().__init__(
            reason,
            provider=provider,
            model=model,
            url=url,
            status=status,
            detail=detail,
            attempts=attempts,
        )


class ProviderStatusError(ProviderError):
    """The provider answered with an error status that no retry fixed.

    A 4xx other than 401/403/429 (unknown model, invalid parameter) is not
    retried; a 5xx is, and this is raised when the retries run out.
    """


class ProviderResponseError(ProviderError):
    """The provider answered with success but the body is not what its API documents."""


class ProviderStreamCut(ProviderError):
    """A streamed reply stopped before the API said it was complete.

    The connection dropped, went quiet past the timeout, or closed without the
    API's end marker. ``received`` is how many characters had arrived: they are
    not a reply, and no retry is made (the text already went out as deltas);
    the caller decides whether to ask again.
    """

    def __init__(
        self,
        reason: str,
        *,
        provider: str,
        model: str,
        received: int,
        url: str | None = None,
    ) -> None:
        self.received = received
        super().__init__(
            f"the reply was cut off mid-stream after {received} characters: {reason}",
            provider=provider,
            model=model,
            url=url,
        )
