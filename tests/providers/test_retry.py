"""The retry schedule and the Retry-After parser: pure functions, no clock, no sleeping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesh.providers import RetryPolicy, backoff_schedule, parse_retry_after
from mesh.providers._retry import is_retryable_status, retry_after_from_headers, retry_wait

NOW = datetime(2026, 1, 7, 8, 0, 0, tzinfo=UTC)


def test_backoff_ceilings_double_from_half_a_second_up_to_the_cap() -> None:
    policy = RetryPolicy(max_retries=7)
    assert list(backoff_schedule(policy, random=lambda: 1.0)) == [
        0.5,
        1.0,
        2.0,
        4.0,
        8.0,
        8.0,
        8.0,
    ]


def test_backoff_is_full_jitter_scaled_by_the_random_draw() -> None:
    draws = iter([0.5, 0.25, 0.0])
    delays = list(backoff_schedule(RetryPolicy(max_retries=3), random=lambda: next(draws)))
    assert delays == [0.25, 0.25, 0.0]


def test_backoff_yields_one_wait_per_retry_and_none_without_retries() -> None:
    assert len(list(backoff_schedule(RetryPolicy(max_retries=3)))) == 3
    assert list(backoff_schedule(RetryPolicy(max_retries=0))) == []


@given(
    retries=st.integers(min_value=0, max_value=12),
    draw=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_every_backoff_wait_lies_under_its_ceiling(retries: int, draw: float) -> None:
    policy = RetryPolicy(max_retries=retries)
    for attempt, delay in enumerate(backoff_schedule(policy, random=lambda: draw)):
        assert 0.0 <= delay < min(policy.cap, policy.base * 2**attempt)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("0", 0.0), ("7", 7.0), (" 120 ", 120.0), ("1.5", 1.5)],
)
def test_retry_after_in_seconds(value: str, seconds: float) -> None:
    assert parse_retry_after(value, now=NOW) == seconds


def test_retry_after_as_an_http_date_counts_from_now() -> None:
    assert parse_retry_after("Wed, 07 Jan 2026 08:00:30 GMT", now=NOW) == 30.0


def test_retry_after_date_in_the_past_means_now() -> None:
    assert parse_retry_after("Wed, 07 Jan 2026 07:59:00 GMT", now=NOW) == 0.0


def test_retry_after_obsolete_date_formats_are_accepted() -> None:
    # RFC 850 and asctime forms, which RFC 9110 still asks recipients to accept.
    assert parse_retry_after("Wednesday, 07-Jan-26 08:01:00 GMT", now=NOW) == 60.0
    assert parse_retry_after("Wed Jan  7 08:00:10 2026", now=NOW) == 10.0


@pytest.mark.parametrize("value", ["", "soon", "-3", "nan", "inf", "Wed, 99 Foo 2026"])
def test_retry_after_garbage_is_ignored(value: str) -> None:
    assert parse_retry_after(value, now=NOW) is None


def test_retry_after_date_uses_the_real_clock_by_default() -> None:
    later = datetime.now(UTC) + timedelta(seconds=100)
    seconds = parse_retry_after(later.strftime("%a, %d %b %Y %H:%M:%S GMT"))
    assert seconds is not None
    assert 95.0 <= seconds <= 100.0


def test_retry_after_ms_header_wins_over_retry_after() -> None:
    headers = httpx.Headers({"Retry-After": "9", "retry-after-ms": "1500"})
    assert retry_after_from_headers(headers) == 1.5
    assert retry_after_from_headers(httpx.Headers({"Retry-After": "9"})) == 9.0
    assert retry_after_from_headers(httpx.Headers({})) is None


def test_retry_wait_prefers_the_servers_ask_but_caps_it() -> None:
    policy = RetryPolicy(max_retry_after=60.0)
    assert retry_wait(0.3, None, policy) == 0.3
    assert retry_wait(0.3, 5.0, policy) == 5.0
    assert retry_wait(0.3, 0.0, policy) == 0.0
    assert retry_wait(0.3, 3600.0, policy) == 60.0


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        *[(status, True) for status in (429, 500, 502, 503, 529, 599)],
        *[(status, False) for status in (200, 400, 401, 403, 404, 422)],
    ],
)
def test_which_statuses_are_retried(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable
