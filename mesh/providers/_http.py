"""The HTTP half every real provider shares: key, client, retries, error translation.

A subclass says where to POST, which headers carry the key, how to build the
body and how to read the answer (pure functions in its own module); this class
sends it, retries 429/5xx/dropped connections on the ``_retry`` schedule, and
turns httpx exceptions and error statuses into the ``ProviderError`` tree.

Given ``on_delta``, ``complete`` streams: it asks for the API's streamed form
and hands each piece of text to ``on_delta`` as it arrives (see ``_stream``).
Retries happen only before the reply's first byte; once text has gone out, a
dropped, stalled or unfinished stream is a :class:`ProviderStreamCut`. The
API key lives in one attribute and one header; it is never logged, and it is
cut out of any error text a provider echoes back.
"""

from __future__ import annotations

import abc
import functools
import os
import random as _random
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeAlias, TypeVar

import anyio
import httpx
import msgspec

from mesh._logging import get_logger

from ._base import ChatMessage, Completion, ProviderBase, ProviderConfig
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
from ._retry import (
    RetryPolicy,
    backoff_schedule,
    is_retryable_status,
    retry_after_from_headers,
    retry_wait,
)
from ._stream import LineDecoder, StreamFault, StreamReader, TextSink

__all__ = ["BodyError", "HttpProvider", "Sleep", "error_detail", "join_url", "safe_url"]

Sleep = Callable[[float], Awaitable[None]]

_log = get_logger("mesh.providers")

#: Failures where the request may never have reached the model: worth retrying.
_RETRYABLE_TRANSPORT: tuple[type[httpx.TransportError], ...] = (
    httpx.NetworkError,  # connect refused, reset, read/write error
    httpx.RemoteProtocolError,  # "server disconnected without sending a response"
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
#: The model is slow, not absent: retrying would multiply the wait, so fail now.
_FATAL_TIMEOUTS: tuple[type[httpx.TimeoutException], ...] = (httpx.ReadTimeout, httpx.WriteTimeout)
#: Enough of an error body to recognise it without flooding a log line.
_MAX_DETAIL = 300
_REDACTED = "[redacted]"
#: What each framing's streamed reply is sent as.
_STREAM_ACCEPT = {"sse": "text/event-stream", "ndjson": "application/x-ndjson"}

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Done(Generic[T]):
    """An attempt that succeeded, with what it got."""

    value: T


#: An attempt that failed in a way the retry schedule may answer: an error status
#: (its body read) or a transport error before any response.
_Failed: TypeAlias = httpx.Response | httpx.TransportError


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~80 ms per client; a daemon with many personas shares one.
    return httpx.create_ssl_context()


class BodyError(Exception):
    """A parse function's complaint about a response body (what was missing)."""


def join_url(base: str, path: str) -> str:
    """``base`` + ``path``, without doubling a shared version segment.

    ``http://host:8000/v1`` + ``/v1/chat/completions`` gives one ``/v1``, as
    users of vLLM and llama.cpp tend to write the base URL with it.
    """
    base = base.rstrip("/")
    first = "/" + path.lstrip("/").split("/", 1)[0]
    if base.endswith(first):
        base = base[: -len(first)]
    return base + "/" + path.lstrip("/")


def safe_url(url: str) -> str:
    """The URL without userinfo or query string, fit for logs and errors."""
    return str(httpx.URL(url).copy_with(username=None, password=None, query=None))


def error_detail(content: bytes, *, secret: str | None = None) -> str | None:
    """The provider's own error message from a body, or its first bytes.

    Understands ``{"error": "..."}`` (Ollama) and ``{"error": {"message": ...}}``
    (OpenAI, Anthropic, Gemini; with ``type`` or ``status`` when present).
    """
    try:
        data = msgspec.json.decode(content)
    except msgspec.DecodeError:
        data = None
    text = _message_from(data) if data is not None else None
    if text is None:
        text = content.decode("utf-8", "replace").strip() or None
    if text is None:
        return None
    if secret:
        text = text.replace(secret, _REDACTED)
    return text if len(text) <= _MAX_DETAIL else text[:_MAX_DETAIL] + "..."


def _message_from(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    if isinstance(error, str):
        return error
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    kind = error.get("type") or error.get("status")
    return f"{kind}: {error['message']}" if isinstance(kind, str) else str(error["message"])


class HttpProvider(ProviderBase, abc.ABC):
    """A provider reached over HTTP with a JSON POST per completion."""

    name: ClassVar[str]
    #: How this API streams (``None``: it does not, and ``on_delta`` gets the whole reply).
    stream_reader: ClassVar[type[StreamReader] | None] = None

    def __init__(
        self,
        config: ProviderConfig,
        *,
        http_client: httpx.AsyncClient | None = None,
        env: Mapping[str, str] | None = None,
        sleep: Sleep | None = None,
        random: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(config)
        self._key_env = config.resolved_api_key_env()
        self._api_key = self._read_key(os.environ if env is None else env)
        self._url = self.endpoint()
        self._safe_url = safe_url(self._url)
        self._headers = {"content-type": "application/json", "accept": "application/json"}
        self._headers.update(self.auth_headers(self._api_key))
        self._timeout = httpx.Timeout(config.timeout)
        self._policy = RetryPolicy(max_retries=config.max_retries)
        self._sleep: Sleep = sleep or anyio.sleep
        self._random = random or _random.random
        self._owns_client = http_client is None
        self._client = http_client or httpx.AsyncClient(
            timeout=self._timeout, verify=_ssl_context()
        )

    # -- what a subclass provides ------------------------------------------------

    @abc.abstractmethod
    def endpoint(self) -> str:
        """The full URL completions are POSTed to."""

    @abc.abstractmethod
    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        """The headers that carry ``api_key``, plus any fixed version header."""

    @abc.abstractmethod
    def build_body(
        self, messages: Sequence[ChatMessage], system: str | None, config: ProviderConfig
    ) -> dict[str, Any]:
        """The JSON request body for this API, with ``config``'s sampling settings."""

    @abc.abstractmethod
    def parse_body(self, data: dict[str, Any]) -> Completion:
        """The completion from a decoded success body; ``BodyError`` says what is missing."""

    def stream_endpoint(self) -> str:
        """Where streamed completions are POSTed (the same URL, unless the API differs)."""
        return self.endpoint()

    def stream_body(
        self, messages: Sequence[ChatMessage], system: str | None, config: ProviderConfig
    ) -> dict[str, Any]:
        """The JSON body that asks for a streamed reply (``"stream": true`` by default)."""
        return {**self.build_body(messages, system, config), "stream": True}

    def is_auth_failure(self, status: int, detail: str | None) -> bool:
        return status in (401, 403)

    def body_retry_after(self, content: bytes) -> float | None:
        """A wait the provider asks for in its error body (Gemini's ``RetryInfo``)."""
        return None

    # -- the shared machinery ----------------------------------------------------

    @property
    def url(self) -> str:
        """Where completions are POSTed (without userinfo or query)."""
        return self._safe_url

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        system: str | None = None,
        on_delta: TextSink | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> Completion:
        config = self.config.for_call(max_tokens=max_tokens, seed=seed)
        if on_delta is not None and self.stream_reader is not None:
            body = msgspec.json.encode(self.stream_body(messages, system, config))
            completion = await self._retrying(lambda: self._stream_attempt(body, on_delta))
            self._log_completion(completion)
            return completion
        content = msgspec.json.encode(self.build_body(messages, system, config))
        response = await self._retrying(lambda: self._attempt(content))
        data = self._decode(response)
        try:
            completion = self.parse_body(data)
        except (BodyError, msgspec.ValidationError) as exc:
            raise self._error(
                ProviderResponseError, f"unexpected response body: {exc}", response.status_code
            ) from exc
        self._log_completion(completion)
        if on_delta is not None:
            on_delta(completion.text)  # an API that cannot stream: the reply in one piece
        return completion

    def _log_completion(self, completion: Completion) -> None:
        _log.debug(
            "provider completion",
            provider=self.name,
            model=completion.model,
            finish_reason=completion.finish_reason,
            input_tokens=completion.usage.input_tokens,
            output_tokens=completion.usage.output_tokens,
        )

    def _read_key(self, env: Mapping[str, str]) -> str | None:
        if self._key_env is None:
            return None
        key = env.get(self._key_env, "").strip()
        if not key:
            raise ProviderAuthError(
                f"the API key env var {self._key_env} is not set or empty; export it, "
                "or name another variable in the provider config's `api_key_env`",
                provider=self.name,
                model=self.config.model,
                env_var=self._key_env,
            )
        return key

    async def _retrying(self, attempt_once: Callable[[], Awaitable[_Done[T] | _Failed]]) -> T:
        """Attempts until one succeeds, on the retry schedule; the last failure is raised."""
        delays = backoff_schedule(self._policy, random=self._random)
        attempt = 0
        while True:
            attempt += 1
            outcome = await attempt_once()
            if isinstance(outcome, _Done):
                return outcome.value
            if isinstance(outcome, httpx.Response) and not is_retryable_status(outcome.status_code):
                raise self._status_error(outcome, attempt)
            delay = next(delays, None)
            if delay is None:
                raise self._final_error(outcome, attempt)
            wait = retry_wait(delay, self._requested_wait(outcome), self._policy)
            _log.warning(
                "provider retry",
                provider=self.name,
                model=self.config.model,
                url=self._safe_url,
                status=outcome.status_code if isinstance(outcome, httpx.Response) else None,
                error=None if isinstance(outcome, httpx.Response) else type(outcome).__name__,
                attempt=attempt,
                wait=round(wait, 3),
            )
            await self._sleep(wait)

    async def _attempt(self, content: bytes) -> _Done[httpx.Response] | _Failed:
        try:
            response = await self._client.post(
                self._url, content=content, headers=self._headers, timeout=self._timeout
            )
            return _Done(response) if response.is_success else response
        except _FATAL_TIMEOUTS as exc:
            raise self._error(
                ProviderTimeout, f"no answer within {self.config.timeout:g} s ({exc!r})"
            ) from exc
        except _RETRYABLE_TRANSPORT as exc:
            return exc
        except httpx.TransportError as exc:  # proxy failures, unsupported scheme, ...
            raise self._error(ProviderUnreachable, f"request failed: {exc!r}") from exc

    async def _stream_attempt(
        self, content: bytes, on_delta: TextSink
    ) -> _Done[Completion] | _Failed:
        assert self.stream_reader is not None
        reader = self.stream_reader(self.config)
        headers = {**self._headers, "accept": _STREAM_ACCEPT[reader.framing]}
        try:
            request = self._client.stream(
                "POST",
                self.stream_endpoint(),
                content=content,
                headers=headers,
                timeout=self._timeout,
            )
            async with request as response:
                if not response.is_success:
                    await response.aread()
                    return response
                return _Done(await self._read_stream(response, reader, on_delta))
        except _FATAL_TIMEOUTS as exc:
            if reader.parts:
                raise self._cut(f"no data within {self.config.timeout:g} s", reader) from exc
            raise self._error(
                ProviderTimeout, f"no answer within {self.config.timeout:g} s ({exc!r})"
            ) from exc
        except _RETRYABLE_TRANSPORT as exc:
            return exc
        except httpx.TransportError as exc:
            raise self._error(ProviderUnreachable, f"request failed: {exc!r}") from exc

    async def _read_stream(
        self, response: httpx.Response, reader: StreamReader, on_delta: TextSink
    ) -> Completion:
        decoder = LineDecoder(reader.framing)
        fault: ProviderError | None = None
        try:
            # Read to the end even after a fault (a server ends the stream after its
            # error event): httpx's generators, left half-read, would be finalized late.
            async for line in response.aiter_lines():
                if fault is None:
                    fault = self._feed(reader, decoder.feed(line), on_delta)
            if fault is None:
                fault = self._feed(reader, decoder.flush(), on_delta)
        except httpx.TransportError as exc:
            # After the headers nothing is retried: part of the reply may be out already.
            raise fault or self._cut(f"the connection failed ({exc!r})", reader) from exc
        if fault is not None:
            raise fault
        if not reader.complete:
            raise self._cut("the stream ended without the API's end marker", reader)
        return reader.completion()

    def _feed(
        self, reader: StreamReader, events: Iterable[tuple[str, str]], on_delta: TextSink
    ) -> ProviderError | None:
        """Hand each event's text to ``on_delta``; the error a faulty event makes, if any."""
        for event, data in events:
            try:
                piece = reader.feed(event, data)
            except StreamFault as exc:
                reason = str(exc).replace(self._api_key, _REDACTED) if self._api_key else str(exc)
                return self._error(ProviderResponseError, reason, 200)
            if piece:
                on_delta(piece)
        return None

    def _cut(self, reason: str, reader: StreamReader) -> ProviderStreamCut:
        return ProviderStreamCut(
            reason,
            provider=self.name,
            model=self.config.model,
            received=len(reader.text),
            url=self._safe_url,
        )

    def _requested_wait(self, outcome: httpx.Response | httpx.TransportError) -> float | None:
        if not isinstance(outcome, httpx.Response):
            return None
        asked = retry_after_from_headers(outcome.headers)
        return asked if asked is not None else self.body_retry_after(outcome.content)

    def _final_error(
        self, outcome: httpx.Response | httpx.TransportError, attempts: int
    ) -> ProviderError:
        if isinstance(outcome, httpx.Response):
            return self._status_error(outcome, attempts)
        kind: type[ProviderError] = (
            ProviderTimeout if isinstance(outcome, httpx.TimeoutException) else ProviderUnreachable
        )
        error = self._error(kind, f"cannot reach the provider: {outcome!r}", attempts=attempts)
        error.__cause__ = outcome
        return error

    def _status_error(self, response: httpx.Response, attempts: int) -> ProviderError:
        status = response.status_code
        detail = error_detail(response.content, secret=self._api_key)
        fields: dict[str, Any] = {
            "provider": self.name,
            "model": self.config.model,
            "url": self._safe_url,
            "status": status,
            "detail": detail,
        }
        if self.is_auth_failure(status, detail):
            return ProviderAuthError(self._auth_reason(), env_var=self._key_env, **fields)
        if status == 429:
            return ProviderRateLimited(
                "rate limited",
                retry_after=self._requested_wait(response),
                attempts=attempts,
                **fields,
            )
        reason = "server error" if status >= 500 else "request rejected"
        return ProviderStatusError(reason, attempts=attempts, **fields)

    def _auth_reason(self) -> str:
        if self._key_env is None:
            return "the provider wants an API key; name its env var in `api_key_env`"
        return f"the provider refused the API key from {self._key_env}"

    def _decode(self, response: httpx.Response) -> dict[str, Any]:
        try:
            data = msgspec.json.decode(response.content)
        except msgspec.DecodeError as exc:
            raise self._error(
                ProviderResponseError,
                f"response body is not JSON ({exc})",
                response.status_code,
                detail=error_detail(response.content, secret=self._api_key),
            ) from exc
        if not isinstance(data, dict):
            raise self._error(
                ProviderResponseError,
                f"response body is a JSON {type(data).__name__}, not an object",
                response.status_code,
            )
        return data

    def _error(
        self,
        kind: type[ProviderError],
        reason: str,
        status: int | None = None,
        *,
        detail: str | None = None,
        attempts: int = 1,
    ) -> ProviderError:
        return kind(
            reason,
            provider=self.name,
            model=self.config.model,
            url=self._safe_url,
            status=status,
            detail=detail,
            attempts=attempts,
        )
