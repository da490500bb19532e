"""Fixtures for the provider tests."""

from __future__ import annotations

import pytest

from ._specs import SPECS, Spec


@pytest.fixture(params=SPECS, ids=lambda spec: spec.provider)
def spec(request: pytest.FixtureRequest) -> Spec:
    result: Spec = request.param
    return result
