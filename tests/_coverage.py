"""Coverage's settings for the suite's child processes: the same lines, less work at each exit.

Under ``make test`` coverage.py hands its settings to every Python child the suite starts
(pyproject's ``[tool.coverage.run] patch = ["subprocess"]`` puts them in
``COVERAGE_PROCESS_CONFIG``, and a ``.pth`` hook starts coverage from them). With ``source``
set, each process walks the source trees when it saves its data and records every module
it did not run, so that a module nobody imports still shows as 0 %: about 25 ms of a short
child's CPU, two thirds of its save, over a thousand times a run, for a list that the test
process, which keeps ``source``, writes once. The children get
``include`` globs of the same directories instead, which trace exactly the same files and
skip the walk. ``omit`` patterns are made absolute, as the test process reads them from the
repository's root; a child started in a temporary directory would read them from there.
"""

from __future__ import annotations

import os

import pytest
from coverage.config import CoverageConfig

#: Where coverage.py's subprocess patch leaves its settings for child processes.
CHILD_SETTINGS = "COVERAGE_PROCESS_CONFIG"


def _absolute(pattern: str) -> str:
    # coverage.py's own rule: a pattern that starts with a wildcard matches anywhere.
    return pattern if pattern.startswith(("*", "?")) else os.path.abspath(pattern)


def for_children(serialized: str) -> str | None:
    """The children's settings: ``source`` directories as ``include`` globs, or None.

    None leaves the settings as they are: no ``source``, or one that names an importable
    package rather than a directory (only a directory is a glob's match).
    """
    config = CoverageConfig.deserialize(serialized)
    source = config.source or []
    if not source or not all(os.path.isdir(path) for path in source):
        return None
    # The tracer matches a file by its real path, so the globs hold real paths too.
    config.run_include = [os.path.join(os.path.realpath(path), "*") for path in source]
    config.source = None
    config.run_omit = [_absolute(pattern) for pattern in config.run_omit]
    return config.serialize()


def pytest_configure(config: pytest.Config) -> None:
    serialized = os.environ.get(CHILD_SETTINGS)
    lighter = for_children(serialized) if serialized else None
    if lighter is not None:
        os.environ[CHILD_SETTINGS] = lighter
