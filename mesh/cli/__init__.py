"""The ``mesh`` command: run the daemon, and talk to a running one."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mesh.cli._codes import EXIT_INTERRUPTED

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mesh`` with ``argv`` (default: the command line); returns the exit status."""
    try:
        from mesh.cli._main import main as run
    except KeyboardInterrupt:  # Ctrl-C while the command loads: the same line as later
        print("mesh: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return run(argv)
