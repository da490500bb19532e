"""``mesh validate [DIR]``: check a directory of manifests and say what is wrong, precisely.

Kept apart from the CLI's argument parsing so it can be tested (and reused by
``mesh serve`` at start-up) without a subprocess. One line per file, good or
bad; a token variable that is unset is a warning, not a failure, because the
file is still valid and the variable may be set where the daemon runs.
"""

from __future__ import annotations

import enum
import os
import shlex
import sys
from collections.abc import Mapping
from typing import TextIO

from mesh.manifests._load import (
    DialInSection,
    HttpSection,
    Manifest,
    ManifestError,
    StdioSection,
    WebSocketSection,
    load_manifests,
)

__all__ = ["ValidateExit", "describe_transport", "validate_manifests"]


class ValidateExit(enum.IntEnum):
    """Exit statuses of ``mesh validate``, for scripts."""

    OK = 0
    """Every manifest is valid (warnings may have been printed)."""
    INVALID = 1
    """At least one manifest is invalid or repeats an id."""
    UNREADABLE = 2
    """The directory itself is missing or unreadable."""


def describe_transport(manifest: Manifest) -> tuple[str, str]:
    """The transport's tag and where it goes (command line or endpoint), for tables."""
    transport = manifest.transport
    match transport:
        case StdioSection():
            return "stdio", shlex.join([transport.command, *transport.args])
        case HttpSection():
            return "http", transport.endpoint
        case WebSocketSection():
            return "websocket", transport.endpoint
        case DialInSection():
            return "dial-in", "(the agent dials in)"


def _warning(manifest: Manifest, environ: Mapping[str, str]) -> str | None:
    try:
        manifest.transport.token(environ)
    except ManifestError as exc:
        return exc.reason
    return None


def validate_manifests(
    directory: str | os.PathLike[str] = "manifests",
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> ValidateExit:
    """Print one line per manifest file (errors to ``err``) and a summary; return the status."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    environ = os.environ if environ is None else environ
    try:
        loaded = load_manifests(directory)
    except ManifestError as exc:
        print(f"error: {exc}", file=err)
        return ValidateExit.UNREADABLE
    rows = [
        (str(loaded.sources[agent_id]), agent_id, *describe_transport(manifest))
        for agent_id, manifest in loaded.manifests.items()
    ]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("ok  " + "  ".join([*cells, row[3]]), file=out)
    for agent_id, manifest in loaded.manifests.items():
        if (warning := _warning(manifest, environ)) is not None:
            print(f"warning: {loaded.sources[agent_id]}: {warning}", file=err)
    for error in loaded.errors:
        print(f"error: {error}", file=err)
    print(f"{len(loaded.manifests)} valid, {len(loaded.errors)} invalid", file=out)
    return ValidateExit.OK if loaded.ok else ValidateExit.INVALID
