"""The settings for joining a mesh of daemons over NATS, declared once.

``mesh serve`` reads them (a TOML file, ``MESH_*`` variables, flags) as part of its own
settings and hands them to ``mesh.cluster``, whose settings are these plus what only the
cluster needs. Both inherit :class:`NatsSettings`, so a knob added here is in the daemon's
file, its variables and the cluster's settings at once. It lives below both (and needs
only msgspec) so that a daemon that runs alone does not import the cluster.
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = ["SECRETS", "NatsSettings", "variable_of"]

#: Settings whose values are secrets: never shown, whatever shows the settings.
SECRETS: Final = frozenset({"nats_token", "nats_password"})


class NatsSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to reach NATS and who this daemon is there. Secrets come from variables or a file."""

    #: Join the mesh of daemons at this NATS URL (several: comma-separated,
    #: ``nats://host:4222``, ``tls://...``); "" runs alone.
    nats: str = ""
    #: Daemons with the same cluster id on one NATS are one mesh.
    cluster_id: str = "mesh"
    #: Unique per daemon; "" picks ``<hostname>-<random>`` at start.
    daemon_id: str = ""
    nats_token: str | None = None
    nats_user: str | None = None
    nats_password: str | None = None
    #: A NATS ``.creds`` file (user JWT and nkey seed; needs the ``nkeys`` package).
    nats_creds: str | None = None
    nats_tls_ca: str | None = None
    nats_tls_cert: str | None = None
    nats_tls_key: str | None = None
    #: A room's holder renews its lease every third of this; a dead holder's rooms
    #: move to another daemon within it.
    room_lease_ttl: float = 10.0
    #: Join a NATS at a network address in plaintext with no credentials anyway
    #: (anyone who reaches that NATS can then read calls and forge registry entries).
    nats_allow_open: bool = False

    def __repr__(self) -> str:
        # Settings end up in errors and debug logs: the secrets never do.
        shown = ", ".join(
            f"{name}={'***' if name in SECRETS and value else repr(value)}"
            for name, value in msgspec.structs.asdict(self).items()
        )
        return f"{type(self).__name__}({shown})"


def variable_of(name: str) -> str:
    """The environment variable that sets a setting: ``nats_user`` is ``$MESH_NATS_USER``."""
    return f"MESH_{name.upper()}"
