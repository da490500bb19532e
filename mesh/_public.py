"""Exported names carry their public module, so reprs and tracebacks name ``mesh.Peer``.

httpx and trio rewrite ``__module__`` the same way. Annotations written as strings
(``from __future__ import annotations``) are resolved first, in the module that
defined them: msgspec, dataclasses and ``typing.get_type_hints`` look names up in
``sys.modules[cls.__module__]``, which after the rewrite would be the wrong module.
"""

from __future__ import annotations

import importlib
import sys
import typing
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any


def publish(namespace: MutableMapping[str, Any], names: Iterable[str]) -> None:
    """Give every object in ``names`` defined in a private module the namespace's own name."""
    public = namespace["__name__"]
    for name in names:
        obj = namespace[name]
        module = getattr(obj, "__module__", None)
        if not isinstance(module, str) or "._" not in module or isinstance(obj, str):
            continue
        if not isinstance(obj, type) and not hasattr(obj, "__qualname__"):
            continue  # a constant (mesh.EMBEDDER): an instance names no module of its own
        if isinstance(obj, type):
            _resolve_annotations(obj)
        obj.__module__ = public


def _resolve_annotations(cls: type) -> None:
    for klass in cls.__mro__:
        # In place: inspect.get_annotations returns a copy.
        annotations = klass.__dict__.get("__annotations__")  # noqa: RUF063
        if not annotations or klass.__module__ not in sys.modules:
            continue
        scope = vars(sys.modules[klass.__module__])
        for field, hint in list(annotations.items()):
            if isinstance(hint, str):
                annotations[field] = typing._eval_type(  # type: ignore[attr-defined]
                    typing.ForwardRef(hint, is_class=True), scope, dict(vars(klass)), frozenset()
                )


def lazy_names(
    namespace: MutableMapping[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` that load each name of ``where`` (name ->
    module) on first use, published as the eager import would have.

    A process that imports one private module of the package (a client reading events, an
    agent building a reply) then pays for that module, not for every sibling the package
    exports: importing ``mesh.rooms._events`` runs ``mesh/rooms/__init__.py`` first.
    """
    package = namespace["__name__"]

    def load(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        publish(namespace, [name])
        return value

    def listed() -> list[str]:
        return sorted({*namespace, *where})

    return load, listed
