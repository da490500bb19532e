"""Agent manifests: one TOML file to a :class:`Manifest`, a directory to a :class:`ManifestSet`.

The structs live in ``_manifest_types`` and are re-exported here, so this is the
one module the daemon, the CLI and the orchestrator import. Every failure becomes
a :class:`ManifestError` naming the file, the field's ``$.path`` and the reason,
in msgspec's own words where it has them. A directory loads file by file, so one
broken manifest is reported and the others still load.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec

from mesh.manifests._types import (
    INTERPRETER_COMMANDS,
    TRANSPORT_TYPES,
    AccessSection,
    DialInSection,
    HttpSection,
    Manifest,
    ManifestError,
    Persona,
    StdioSection,
    TransportSection,
    WebSocketSection,
    _FieldError,
    _FieldErrors,
)
from mesh.providers._base import ProviderConfig

__all__ = [
    "INTERPRETER_COMMANDS",
    "TRANSPORT_TYPES",
    "AccessSection",
    "DialInSection",
    "HttpSection",
    "Manifest",
    "ManifestError",
    "ManifestSet",
    "Persona",
    "StdioSection",
    "TransportSection",
    "WebSocketSection",
    "load_manifest",
    "load_manifests",
]

# msgspec ends a validation message with " - at `$.path`"; at the root it omits it.
_AT = re.compile(r"(?P<reason>.*) - at `(?P<path>\$[^`]*)`", re.DOTALL)
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<name>[^`]*)`")


def _field_names(*types: type[msgspec.Struct]) -> tuple[str, ...]:
    return tuple(f.encode_name for t in types for f in msgspec.structs.fields(t))


#: The fields valid at each table of a manifest, to suggest one for a typo.
_FIELDS_AT: Final[Mapping[str, tuple[str, ...]]] = {
    "$": _field_names(Manifest),
    "$.transport": (
        "type",
        *dict.fromkeys(_field_names(StdioSection, HttpSection, WebSocketSection, DialInSection)),
    ),
    "$.persona": _field_names(Persona),
    "$.access": _field_names(AccessSection),
    "$.persona.provider": _field_names(ProviderConfig),
}


def hint(reason: str, path: str) -> str:
    """msgspec's reason, plus what the author most likely meant."""
    if path == "$.transport.type" and reason.startswith("Invalid value"):
        return f"{reason}; expected one of {', '.join(map(repr, TRANSPORT_TYPES))}"
    unknown = _UNKNOWN.fullmatch(reason)
    if unknown is None:
        return reason
    name = unknown["name"]
    if name == "token":
        return (
            f"{reason}; a token never goes in a manifest: put it in an environment "
            "variable and name the variable with `token_env`"
        )
    close = difflib.get_close_matches(name, _FIELDS_AT.get(path, ()), n=1)
    return f"{reason}; did you mean `{close[0]}`?" if close else reason


def located(exc: msgspec.ValidationError, root: str = "$") -> list[tuple[str, str]]:
    """``(path, reason)`` for each problem a validation error carries, paths under ``root``.

    One, unless a struct's ``__post_init__`` found several (:class:`_FieldErrors`).
    """
    match = _AT.fullmatch(str(exc))
    reason, path = (match["reason"], match["path"]) if match else (str(exc), "$")
    path = root + path.removeprefix("$")
    cause = exc.__cause__
    if isinstance(cause, _FieldErrors):
        return [(f"{path}.{e.field}", e.reason) for e in cause.errors]
    if isinstance(cause, _FieldError):
        return [(f"{path}.{cause.field}", cause.reason)]
    return [(path, reason)]


def _from_validation(exc: msgspec.ValidationError, file: Path) -> ManifestError:
    path, reason = located(exc)[0]
    return ManifestError(hint(reason, path), file=file, field=path)


def _resolved(manifest: Manifest, base: Path) -> Manifest:
    transport = manifest.transport
    if isinstance(transport, StdioSection) and transport.cwd is not None:
        return msgspec.structs.replace(manifest, transport=transport.resolve(base))
    if isinstance(transport, HttpSection) and transport.oauth is not None:
        oauth = transport.oauth.resolve(base)
        return msgspec.structs.replace(
            manifest, transport=msgspec.structs.replace(transport, oauth=oauth)
        )
    return manifest


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read and validate one manifest file.

    A relative ``cwd`` of a stdio transport comes back absolute, against the
    file's directory. Raises :class:`ManifestError` naming the file, the field's
    path and the reason, or the line and column of a TOML syntax error.
    """
    file = Path(path)
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read: {exc.strerror or exc}", file=file) from exc
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        raise ManifestError(reason, file=file) from exc
    try:
        manifest = msgspec.toml.decode(text, type=Manifest)
    except msgspec.ValidationError as exc:
        raise _from_validation(exc, file) from exc
    except msgspec.DecodeError as exc:
        # tomllib's message already carries "(at line L, column C)".
        raise ManifestError(f"invalid TOML: {exc}", file=file) from exc
    return _resolved(manifest, file.parent)


@dataclass(frozen=True, slots=True)
class ManifestSet:
    """What a directory of manifests held: the good ones by id, and every error.

    ``sources`` maps each loaded id to its file. A file that fails, or repeats an
    id already loaded from a file earlier in name order, is in ``errors`` instead.
    """

    manifests: dict[str, Manifest] = field(default_factory=dict)
    errors: list[ManifestError] = field(default_factory=list)
    sources: dict[str, Path] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """``True`` when every file loaded."""
        return not self.errors

    def token(self, agent_id: str, environ: Mapping[str, str] | None = None) -> str | None:
        """Agent ``agent_id``'s transport token; an unset variable's error names the file."""
        try:
            return self.manifests[agent_id].transport.token(environ)
        except ManifestError as exc:
            raise exc.in_file(self.sources[agent_id], agent=agent_id) from None


def load_manifests(directory: str | os.PathLike[str]) -> ManifestSet:
    """Load every ``*.toml`` in ``directory`` (not recursive, dotfiles skipped), by name.

    Errors are collected, not raised, so the good manifests still load; only a
    missing or unreadable directory raises :class:`ManifestError`. A file in place of
    the directory is loaded by itself (``mesh validate agent.toml``).
    """
    folder = Path(directory)
    try:
        if folder.is_file():  # one manifest named by itself: loaded whatever its name
            return _load_each([folder])
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise ManifestError(f"cannot read directory: {exc.strerror or exc}", file=folder) from exc
    wanted = (f for f in entries if f.suffix == ".toml" and not f.name.startswith("."))
    return _load_each([file for file in wanted if file.is_file()])


def _load_each(files: list[Path]) -> ManifestSet:
    """Load ``files``, collecting each one's error and refusing a repeated agent id."""
    loaded = ManifestSet()
    for file in files:
        try:
            manifest = load_manifest(file)
        except ManifestError as exc:
            loaded.errors.append(exc)
            continue
        if (first := loaded.sources.get(manifest.id)) is not None:
            reason = f"duplicate agent id {manifest.id!r}, already defined in {first}"
            loaded.errors.append(ManifestError(reason, file=file, field="$.id"))
            continue
        loaded.manifests[manifest.id] = manifest
        loaded.sources[manifest.id] = file
    return loaded
