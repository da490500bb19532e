"""Shared fixtures: every async test runs on asyncio *and* trio.

The backends are declared explicitly, so a missing trio is an import error,
not a silent skip.
"""

from __future__ import annotations

import pytest
import trio  # noqa: F401  (imported so that a missing trio fails collection)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
