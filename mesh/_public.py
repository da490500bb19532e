"""Exported names carry their public module, so reprs and tracebacks name ``mesh.Peer``.

httpx and trio rewrite ``__module__`` the same way. Annotations written as strings
(``from __future__ import annotations``) are resolved first, in the module that
defined them: msgspec, dataclasses and ``typing.get_type_hints`` look names up in
``sys.modules[cls.__module__]``, which after the rewrite would be the wrong module.

What a name costs to load is decided here too: :func:`lazy_names` loads a package's
names on first use, and :func:`defer_httpx_cli` keeps httpx's command-line client
(click, pygments and rich, when installed) out of a process until it is used.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import typing
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader  # at run time 45 ms of importlib.resources: duck-typed

#: httpx's command-line client, which ``import httpx`` imports with the rest.
HTTPX_CLI = "httpx._main"


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


class _HttpxCliOnUse:
    """Finds ``httpx._main`` once, as a stand-in that loads the real module on first use.

    ``httpx/__init__.py`` runs ``from ._main import main``, its command-line client, which
    imports click, pygments and rich when they are installed (they are in a development
    install, with the test suite): a tenth of a second and more in every process that makes
    an HTTP request, a daemon, a persona agent, a ``mesh`` command. The stand-in is a module
    found the ordinary way (so ``httpx._main`` is an attribute of ``httpx`` as before), whose
    ``main`` and every other attribute load the real module, which then takes its place.
    """

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != HTTPX_CLI:
            return None
        _leave_meta_path()  # once: the real module is found the ordinary way after this
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", self))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        # ``main`` is what httpx/__init__.py takes from it, without a load.
        vars(module).update(main=_httpx_cli_main, __getattr__=_httpx_cli_attribute)


def _httpx_cli() -> ModuleType:
    """The real ``httpx._main``, loaded in place of the stand-in if it is not yet."""
    if getattr(sys.modules.get(HTTPX_CLI), "main", None) is _httpx_cli_main:
        sys.modules.pop(HTTPX_CLI, None)  # the stand-in
    return importlib.import_module(HTTPX_CLI)


def _httpx_cli_main(*args: Any, **kwargs: Any) -> Any:
    """``httpx.main``: the command-line client, loaded now."""
    return _httpx_cli().main(*args, **kwargs)


def _httpx_cli_attribute(name: str) -> Any:
    if name.startswith("__"):  # the import system's own questions (``__path__``, …)
        raise AttributeError(f"module {HTTPX_CLI!r} has no attribute {name!r}")
    return getattr(_httpx_cli(), name)


_FINDER = _HttpxCliOnUse()


def _leave_meta_path() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def defer_httpx_cli() -> None:
    """Keep httpx's command-line client unloaded until something uses it (see
    :class:`_HttpxCliOnUse`); a process that imported httpx already keeps it as it is."""
    if "httpx" in sys.modules or HTTPX_CLI in sys.modules or _FINDER in sys.meta_path:
        return
    sys.meta_path.insert(0, _FINDER)
