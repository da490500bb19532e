"""Every error of one manifest file, for ``mesh validate``.

msgspec stops at the first problem, which is right for loading and slow for an
author fixing a file: three mistakes would take three runs. This walks the
decoded TOML table by table and field by field against the same structs, so
each wrong field is reported once with its path, then runs each table's own
checks (its ``__post_init__``) on the fields that were valid, standing in a
valid value for a required field that was not.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import UnionType
from typing import Any, Final, Union, get_args, get_origin

import msgspec

from mesh.manifests._load import ManifestError, hint, load_manifest, located
from mesh.manifests._types import Manifest
from mesh.providers._base import ProviderConfig

__all__ = ["manifest_errors"]

Problem = tuple[str, str]  # (path, reason)

#: Valid values for required fields whose own value was wrong, so the checks of
#: the table around them still run (their own errors were reported already).
_STAND_INS: Final[dict[str, Any]] = {
    "transport": {"type": "dial-in", "token_env": "STAND_IN"},
    "provider": {"provider": "scripted", "script": ["stand-in"]},
    "id": "stand-in",
}

_KINDS: Final = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    list: "array",
    dict: "object",
}


def manifest_errors(path: str | os.PathLike[str]) -> list[ManifestError]:
    """Every problem of the manifest at ``path``; ``[]`` when it loads."""
    file = Path(path)
    try:
        load_manifest(file)
    except ManifestError as first:
        if first.field is None:
            return [first]  # unreadable, not UTF-8 or not TOML: there is nothing to walk
        problems = _struct_errors(msgspec.toml.decode(file.read_bytes()), Manifest, "$")
        found = [ManifestError(hint(reason, at), file=file, field=at) for at, reason in problems]
        return found or [first]
    return []


def _struct_errors(raw: Any, cls: type[msgspec.Struct], path: str) -> list[Problem]:
    if not isinstance(raw, dict):
        return [(path, f"Expected `object`, got `{_kind(raw)}`")]
    tag_field = cls.__struct_config__.tag_field
    fields = {f.encode_name: f for f in msgspec.structs.fields(cls)}
    problems: list[Problem] = []
    valid: dict[str, Any] = {}
    for key, value in raw.items():
        field = fields.get(key)
        if key == tag_field:
            valid[key] = value
        elif field is None:
            problems.append((path, f"Object contains unknown field `{key}`"))
        elif found := _value_errors(value, field.type, f"{path}.{key}"):
            problems += found
        else:
            valid[key] = value
    required = [name for name, f in fields.items() if f.required]
    problems += [(path, f"Object missing required field `{n}`") for n in required if n not in raw]
    # Missing or wrong, a required field gets a stand-in so the checks that need a whole
    # struct still run: a file shows every error before its `id` is fixed, not after.
    stood_in = [name for name in required if name not in valid]
    if all(name in valid or name in _STAND_INS for name in required):
        valid.update((name, _STAND_INS[name]) for name in stood_in)
        problems += [
            (at, reason)
            for at, reason in _checks(valid, cls, path)
            if not any(at.startswith(f"{path}.{name}") for name in stood_in)
        ]
    return problems


def _checks(valid: dict[str, Any], cls: type[msgspec.Struct], path: str) -> list[Problem]:
    """What the struct's own checks (``__post_init__``) say about values of the right types."""
    try:
        msgspec.convert(valid, cls, strict=True)
    except msgspec.ValidationError as exc:
        return located(exc, path)
    return []


def _value_errors(value: Any, tp: Any, path: str) -> list[Problem]:
    structs = _structs_in(tp)
    if len(structs) == 1:
        return _struct_errors(value, structs[0], path)
    if structs:
        return _tagged_errors(value, structs, path)
    try:
        msgspec.convert(value, tp, strict=True)
    except msgspec.ValidationError as exc:
        return located(exc, path)
    return []


def _tagged_errors(value: Any, members: list[type[msgspec.Struct]], path: str) -> list[Problem]:
    """A table that is one of several structs, chosen by its tag (``[transport]``)."""
    if not isinstance(value, dict):
        return [(path, f"Expected `object`, got `{_kind(value)}`")]
    tag_field = members[0].__struct_config__.tag_field or "type"
    tag = value.get(tag_field)
    if tag is None:
        return [(path, f"Object missing required field `{tag_field}`")]
    for member in members:
        if member.__struct_config__.tag == tag:
            return _struct_errors(value, member, path)
    return [(f"{path}.{tag_field}", f"Invalid value {tag!r}")]


def _structs_in(tp: Any) -> list[type[msgspec.Struct]]:
    """The struct types ``tp`` is (``Persona``), may be (``Persona | None``) or chooses from."""
    arms = get_args(tp) if get_origin(tp) in (Union, UnionType) else (tp,)
    return [arm for arm in arms if isinstance(arm, type) and issubclass(arm, msgspec.Struct)]


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), type(value).__name__)


# ProviderConfig is a struct of the providers wing; imported so a change to where it
# lives fails here loudly rather than silently skipping the `[persona.provider]` table.
assert issubclass(ProviderConfig, msgspec.Struct)
