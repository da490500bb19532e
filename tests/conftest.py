"""Shared fixtures: every async test runs on asyncio *and* trio.

The backends are declared explicitly, so a missing trio is an import error,
not a silent skip; and collection refuses an async test that would run on
fewer (say, under a local ``anyio_backend`` override that returns one name).
"""

from __future__ import annotations

import inspect

import pytest
import trio  # noqa: F401  (imported so that a missing trio fails collection)

BACKENDS = ("asyncio", "trio")


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _runs_on_a_declared_backend(item: pytest.Item) -> bool:
    if not isinstance(item, pytest.Function) or not inspect.iscoroutinefunction(item.obj):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("anyio_backend") in BACKENDS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    stray = [item.nodeid for item in items if not _runs_on_a_declared_backend(item)]
    if stray:
        listed = "\n  ".join(stray)
        raise pytest.UsageError(
            f"async tests must be parametrized over anyio_backend {BACKENDS} "
            f"(mark them anyio; do not pin one backend):\n  {listed}"
        )
