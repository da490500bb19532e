"""When to retry a provider call and how long to wait: pure functions, no I/O.

The schedule is the mesh's one backoff (:mod:`mesh._backoff`: full jitter, each
wait uniform in ``[0, min(cap, base * 2**n))``), which spreads a crowd of clients
that failed together. A ``Retry-After`` from the server wins over the schedule, bounded by
``max_retry_after`` so one header cannot park a room for an hour. Randomness and
the clock are parameters, so the tests pin every number without sleeping.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from mesh._backoff import backoff

__all__ = [
    "RetryPolicy",
    "backoff_schedule",
    "is_retryable_status",
    "parse_retry_after",
    "retry_after_from_headers",
    "retry_wait",
]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times to retry and how long the waits may be (seconds)."""

    max_retries: int = 3
    #: 0.5 s: the first retry lands quickly, which is what a dropped connection wants.
    base: float = 0.5
    #: 8 s: four doublings from the base; longer waits belong to Retry-After.
    cap: float = 8.0
    #: 60 s: a rate limit asking for more is better reported than waited out in a turn.
    max_retry_after: float = 60.0


def backoff_schedule(
    policy: RetryPolicy, *, random: Callable[[], float] = _random.random
) -> Iterator[float]:
    """Yield the wait before each retry: ``policy.max_retries`` values, then stop.

    ``random`` returns a float in ``[0, 1)``; pass ``lambda: 1.0`` to see the
    ceilings ``0.5, 1, 2, 4, 8, 8, ...``.
    """
    return backoff(base=policy.base, cap=policy.cap, max_attempts=policy.max_retries, random=random)


def parse_retry_after(value: str, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value, or ``None`` if it is not one.

    RFC 9110 allows delay-seconds (``"120"``) or an HTTP-date
    (``"Wed, 21 Oct 2015 07:28:00 GMT"``); a date in the past means "now" (0).
    Fractional seconds are accepted because some gateways send them.
    """
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        return _seconds_until_http_date(text, now)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def _seconds_until_http_date(text: str, now: datetime | None) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; "-0000" parses as naive
        when = when.replace(tzinfo=UTC)
    current = now or datetime.now(UTC)
    return max(0.0, (when - current).total_seconds())


def retry_after_from_headers(
    headers: Mapping[str, str], *, now: datetime | None = None
) -> float | None:
    """The server's requested wait: ``retry-after-ms`` (OpenAI) or ``Retry-After``.

    ``headers`` must be case-insensitive (``httpx.Headers`` is).
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = parse_retry_after(millis)
        if seconds is not None:
            return seconds / 1000.0
    value = headers.get("retry-after")
    return None if value is None else parse_retry_after(value, now=now)


def retry_wait(backoff: float, retry_after: float | None, policy: RetryPolicy) -> float:
    """The wait before the next attempt: the server's ask if any (capped), else backoff."""
    if retry_after is None:
        return backoff
    return min(retry_after, policy.max_retry_after)


def is_retryable_status(status: int) -> bool:
    """429 and every 5xx (Anthropic's 529 "overloaded" included) are worth another try."""
    return status == 429 or 500 <= status <= 599
