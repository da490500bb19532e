"""Shared fixtures: every async test runs on asyncio *and* trio.

The backends are declared explicitly, so a missing trio is an import error,
not a silent skip; and collection refuses an async test that would run on
fewer (say, under a local ``anyio_backend`` override that returns one name).
Hypothesis keeps no example database, so a run leaves nothing in the tree.
"""

from __future__ import annotations

import inspect
import signal
import tempfile

import pytest
import trio  # noqa: F401  (imported so that a missing trio fails collection)
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

BACKENDS = ("asyncio", "trio")

# Each file's CPU, the test process's and its children's, printed at the end of a run; and,
# under coverage, lighter settings for the children it starts (the same lines measured).
pytest_plugins = ["tests._cpu", "tests._coverage"]

# Tests write only under temporary directories: no example database, and what
# Hypothesis caches (constants it reads from the source, as modules are imported)
# goes to a directory of this session, removed at its end.
# A suite started as a shell's background job inherits SIGINT ignored, and so would every
# command it starts: the Ctrl-C tests would find `mesh call` deaf to it. The suite's own
# children get the default, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# No per-example deadline either: 200 ms is a timing assertion, and on a loaded machine
# an example that takes 0.06 ms alone took 280 ms and failed the suite. Each test's own
# timeout still ends one that hangs.
settings.register_profile("mesh", database=None, deadline=None)
settings.load_profile("mesh")
_HYPOTHESIS_HOME = tempfile.TemporaryDirectory(prefix="mesh-hypothesis-")
set_hypothesis_home_dir(_HYPOTHESIS_HOME.name)


def pytest_unconfigure() -> None:
    _HYPOTHESIS_HOME.cleanup()


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _runs_on_a_declared_backend(item: pytest.Item) -> bool:
    if not isinstance(item, pytest.Function) or not inspect.iscoroutinefunction(item.obj):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("anyio_backend") in BACKENDS


#: The order files are run in: those that start daemons, agents and peers first, the ones that
#: run in the test process last. ``make test`` hands whole files to its workers in this order
#: (pytest-xdist, ``--dist loadfile --no-loadscope-reorder``): short files at the end fill the
#: gaps, so the workers run out of work together instead of one finishing a long file alone.
COSTLIEST_FIRST = (
    "tests/integration/",
    "tests/mcp/",
    "tests/cluster/",
    "tests/a2a/",
    "tests/browser/",
    "tests/faults/",
    "tests/observe/",
    "tests/test_",
    "examples/",
    "tests/conformance/",
    "tests/rooms/",
    "tests/registry/",
    "tests/providers/",
    "tests/layers/",
    "tests/unit/",
)


def _rank(item: pytest.Item) -> int:
    path = item.nodeid
    return next(
        (i for i, prefix in enumerate(COSTLIEST_FIRST) if path.startswith(prefix)),
        len(COSTLIEST_FIRST),
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    stray = [item.nodeid for item in items if not _runs_on_a_declared_backend(item)]
    if stray:
        listed = "\n  ".join(stray)
        raise pytest.UsageError(
            f"async tests must be parametrized over anyio_backend {BACKENDS} "
            f"(mark them anyio; do not pin one backend):\n  {listed}"
        )
    items.sort(key=_rank)  # stable: a file's tests keep their order
