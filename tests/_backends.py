"""The backend fixture of a module whose tests share their processes.

A module that starts one daemon (or peer, or cluster) for all its tests holds it in a
module-scoped fixture, which may depend only on fixtures as wide: it imports this
``anyio_backend`` in place of the suite's per-test one (``tests/conftest.py``), so that
every test there still runs on asyncio and on trio, one shared process set per backend::

    from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
"""

from __future__ import annotations

import pytest

from tests.conftest import BACKENDS

__all__ = ["anyio_backend"]


@pytest.fixture(scope="module", params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Module-scoped, so that one set of shared processes per backend serves the module."""
    return str(request.param)
