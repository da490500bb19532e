"""The ``mesh`` command: run the daemon, and talk to a running one."""

from mesh.cli._main import main

__all__ = ["main"]
