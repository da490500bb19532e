"""The backoff schedule: a pure generator, pinned without a clock and without sleeping."""

from __future__ import annotations

import random
from itertools import islice

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesh import ReconnectPolicy
from mesh._backoff import DEFAULT_BASE, DEFAULT_CAP, backoff


def test_defaults_are_one_second_doubling_up_to_thirty() -> None:
    assert (DEFAULT_BASE, DEFAULT_CAP) == (1.0, 30.0)
    ceilings = list(backoff(max_attempts=8, random=lambda: 1.0))
    assert ceilings == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_each_wait_is_the_ceiling_scaled_by_one_draw() -> None:
    draws = iter([0.5, 0.25, 0.0, 0.999])
    delays = list(backoff(base=2.0, cap=100.0, max_attempts=4, random=lambda: next(draws)))
    assert delays == [1.0, 1.0, 0.0, 0.999 * 16.0]


def test_a_seeded_random_instance_gives_a_reproducible_schedule() -> None:
    first = list(backoff(max_attempts=20, random=random.Random(7)))
    again = list(backoff(max_attempts=20, random=random.Random(7)))
    other = list(backoff(max_attempts=20, random=random.Random(8)))
    assert first == again
    assert first != other


@pytest.mark.parametrize("attempts", [0, 1, 5])
def test_max_attempts_is_the_number_of_waits(attempts: int) -> None:
    assert len(list(backoff(max_attempts=attempts))) == attempts


def test_unlimited_runs_past_the_point_where_two_to_the_n_overflows() -> None:
    # 2.0 ** 1100 raises OverflowError; the schedule must keep going at the cap.
    delays = list(islice(backoff(random=lambda: 1.0), 1100))
    assert len(delays) == 1100
    assert delays[-1] == DEFAULT_CAP


@given(
    # Zero, or large enough that ceiling * draw cannot round up to the ceiling.
    base=st.just(0.0) | st.floats(min_value=1e-9, max_value=10.0),
    cap=st.just(0.0) | st.floats(min_value=1e-9, max_value=60.0),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_every_wait_lies_in_its_full_jitter_range(base: float, cap: float, seed: int) -> None:
    for attempt, delay in enumerate(
        backoff(base=base, cap=cap, max_attempts=40, random=random.Random(seed))
    ):
        ceiling = min(cap, base * 2.0**attempt)
        assert 0.0 <= delay <= ceiling
        assert ceiling == 0.0 or delay < ceiling


@pytest.mark.parametrize("kwargs", [{"base": -1.0}, {"cap": -0.5}, {"max_attempts": -1}], ids=str)
def test_bad_arguments_fail_at_the_call_not_at_the_first_wait(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must be|needs"):
        backoff(**kwargs)  # type: ignore[arg-type]


def test_the_reconnect_policy_draws_its_waits_from_this_schedule() -> None:
    policy = ReconnectPolicy(base=0.5, cap=3.0, random=lambda: 1.0)
    assert list(islice(policy.delays(), 5)) == [0.5, 1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize("kwargs", [{"max_attempts": 0}, {"base": -1.0}], ids=str)
def test_the_reconnect_policy_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ReconnectPolicy(**kwargs)  # type: ignore[arg-type]
