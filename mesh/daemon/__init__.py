"""``mesh serve``: the daemon — settings, the HTTP API, room routes, serving them on one port."""

from mesh._public import publish
from mesh.daemon._serve import (
    DaemonSettings,
    ListenError,
    SettingsError,
    load_settings,
    serve_daemon,
)

__all__ = ["DaemonSettings", "ListenError", "SettingsError", "load_settings", "serve_daemon"]


publish(globals(), __all__)
