"""``mesh validate [DIR]``: check a directory of manifests and say what is wrong, precisely.

Kept apart from the CLI's argument parsing so it can be tested (and reused by
``mesh serve`` at start-up) without a subprocess. One ``ok`` line per good file,
one ``error`` line per problem of a bad one (every problem, not the first), and
a summary. Beyond the file itself it checks what the daemon will need here: a
stdio command that resolves to an executable and a ``cwd`` that is a directory.
A token variable that is unset is a warning, not a failure, because the file is
still valid and the variable may be set where the daemon runs.
"""

from __future__ import annotations

import enum
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

import msgspec

from mesh.manifests._check import manifest_errors
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
    """The transport's tag, with the protocol spoken over it when not mesh's own
    (``http (mcp)``, ``stdio (mcp)``, ``http (a2a)``), and where it goes, for tables."""
    transport = manifest.transport
    protocol = getattr(transport, "protocol", "mesh")
    tag, where = _transport_and_where(manifest)
    return (tag if protocol == "mesh" else f"{tag} ({protocol})"), where


def _transport_and_where(manifest: Manifest) -> tuple[str, str]:
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


def stdio_problems(
    manifest: Manifest, file: str | os.PathLike[str], environ: Mapping[str, str]
) -> list[ManifestError]:
    """What would stop the daemon from starting a stdio agent here: its ``cwd`` or command."""
    transport = manifest.transport
    if not isinstance(transport, StdioSection):
        return []
    return _section_problems(transport, file, environ)


def _raw_stdio_problems(
    file: str | os.PathLike[str], environ: Mapping[str, str]
) -> list[ManifestError]:
    """:func:`stdio_problems` for a file that does not load (no ``id`` yet, say): every
    error at once, not the next one only after the first is fixed."""
    try:
        raw = msgspec.toml.decode(Path(file).read_bytes())
        section = raw.get("transport") if isinstance(raw, dict) else None
        if not isinstance(section, dict) or section.get("type") != "stdio":
            return []
        transport = msgspec.convert(section, StdioSection)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return []  # unreadable, or the section's own errors: reported already
    if transport.cwd is not None and not Path(transport.cwd).is_absolute():
        cwd = str(Path(file).parent / transport.cwd)  # as load_manifest resolves it
        transport = msgspec.structs.replace(transport, cwd=cwd)
    return _section_problems(transport, file, environ)


def _section_problems(
    transport: StdioSection, file: str | os.PathLike[str], environ: Mapping[str, str]
) -> list[ManifestError]:
    problems = []
    cwd = transport.cwd
    cwd_ok = cwd is None or Path(cwd).is_dir()
    if not cwd_ok:
        what = "is not a directory" if Path(str(cwd)).exists() else "does not exist"
        problems.append(ManifestError(f"`cwd` {cwd!r} {what}", file=file, field="$.transport.cwd"))
    # A relative path is looked up from `cwd`; when that is missing, one error says enough.
    if cwd_ok or not _is_path(transport.command):
        reason = _unresolved(transport, environ)
        if reason is not None:
            problems.append(ManifestError(reason, file=file, field="$.transport.command"))
    return problems


def _is_path(command: str) -> bool:
    return os.sep in command or bool(os.altsep and os.altsep in command)


def _unresolved(transport: StdioSection, environ: Mapping[str, str]) -> str | None:
    """Why ``command`` would not start, or ``None`` if it resolves to an executable file."""
    command = transport.command
    if _is_path(command):
        # Relative paths are found from the child's working directory, as exec does.
        path = Path(transport.cwd or os.getcwd()) / command
        if not path.is_file():
            return f"command {command!r} does not exist (looked for {path})"
        if not os.access(path, os.X_OK):
            return f"command {command!r} is not executable (chmod +x {path})"
        return None
    search = transport.env.get("PATH", environ.get("PATH", os.defpath))
    if shutil.which(command, path=search) is None:
        return f"command {command!r} is not found on PATH"
    return None


def validate_manifests(
    directory: str | os.PathLike[str] = "manifests",
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
) -> ValidateExit:
    """Print one line per good manifest, one per problem (errors to ``err``) and a summary."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    environ = os.environ if environ is None else environ
    try:
        loaded = load_manifests(directory)
    except ManifestError as exc:
        print(f"error: {exc}", file=err)
        return ValidateExit.UNREADABLE
    problems = {
        agent_id: stdio_problems(manifest, loaded.sources[agent_id], environ)
        for agent_id, manifest in loaded.manifests.items()
    }
    good = {agent_id: m for agent_id, m in loaded.manifests.items() if not problems[agent_id]}
    rows = [
        (str(loaded.sources[agent_id]), agent_id, *describe_transport(manifest))
        for agent_id, manifest in good.items()
    ]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        print("ok  " + "  ".join([*cells, row[3]]), file=out)
    for agent_id, manifest in good.items():
        if (warning := _warning(manifest, environ)) is not None:
            print(f"warning: {loaded.sources[agent_id]}: {warning}", file=err)
    shown: set[str] = set()
    for error in [*loaded.errors, *(p for found in problems.values() for p in found)]:
        # A file that failed to load is read again (once) for every problem it has, not the
        # first, its stdio command and cwd included.
        if error.file is not None and str(error.file) in shown:
            continue
        if error.file is not None and error in loaded.errors:
            shown.add(str(error.file))
            found = manifest_errors(error.file) + _raw_stdio_problems(error.file, environ)
        else:
            found = []
        for each in found or [error]:
            print(f"error: {each}", file=err)
    invalid = len(loaded.errors) + sum(1 for found in problems.values() if found)
    print(f"{len(good)} valid, {invalid} invalid", file=out)
    return ValidateExit.OK if invalid == 0 else ValidateExit.INVALID
