"""``mesh serve``: the daemon — settings, the HTTP API, room routes, serving them on one port.

The names load on first use: a client command that reads the admin token file
(:mod:`mesh.daemon._tokens`) does not load the whole daemon.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mesh._public import publish

if TYPE_CHECKING:
    from mesh.daemon._serve import (
        DaemonSettings,
        ListenError,
        SettingsError,
        load_settings,
        serve_daemon,
    )

__all__ = ["DaemonSettings", "ListenError", "SettingsError", "load_settings", "serve_daemon"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("mesh.daemon._serve"), name)
    globals()[name] = value
    publish(globals(), [name])
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
