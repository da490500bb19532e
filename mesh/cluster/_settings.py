"""What a daemon needs to join a mesh over NATS, and the names everything has there.

:class:`ClusterSettings` come from ``mesh serve --nats URL`` (and ``MESH_NATS*``
variables, and the settings file). :class:`Names` derives every subject, bucket
and stream from the cluster id, so two meshes can share one NATS without seeing
each other, and a reader of ``nats stream ls`` can tell whose is whose.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import secrets
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import msgspec

from mesh._nats_settings import NatsSettings
from mesh.cluster._errors import ClusterError

__all__ = ["ClusterSettings", "Names", "agent_key", "check_id", "key_agent"]

#: Cluster and daemon ids become tokens of subjects and parts of bucket names.
_TOKEN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Agent ids that are KV keys as they are; any other id is stored base64url-encoded.
_PLAIN_KEY: Final = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
_ENCODED: Final = "="


class ClusterSettings(NatsSettings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to reach NATS and who this daemon is there (the knobs of
    :class:`~mesh._nats_settings.NatsSettings`, which ``mesh serve`` reads), and what only
    the cluster sets. Secrets come from variables or a file."""

    #: Where this daemon's HTTP API answers (shown to the others); set by the daemon.
    daemon_url: str = ""
    #: The daemon waits this long for NATS at start, then serves its own agents
    #: while it keeps trying.
    connect_timeout: float = 5.0

    def __post_init__(self) -> None:
        if not self.nats.strip():
            raise ClusterError("--nats needs a URL, e.g. nats://127.0.0.1:4222")
        for url in self.servers:
            _check_server(url)
        for name in ("cluster_id", "daemon_id"):
            value = getattr(self, name)
            if value:
                check_id(name, value)
        if self.room_lease_ttl < 1.0:
            raise ClusterError(f"room_lease_ttl must be at least 1 s, not {self.room_lease_ttl}")
        if (self.nats_tls_cert is None) != (self.nats_tls_key is None):
            raise ClusterError("nats_tls_cert and nats_tls_key go together: give both or neither")

        if not self.credentials and not self.nats_allow_open:
            _refuse_open(self.servers, tls=bool(self.nats_tls_ca or self.nats_tls_cert))

    @property
    def servers(self) -> list[str]:
        return [url.strip() for url in self.nats.split(",") if url.strip()]

    @property
    def credentials(self) -> bool:
        """Whether this daemon presents any credentials to NATS."""
        return bool(self.nats_token or self.nats_user or self.nats_creds)

    def with_daemon(self, daemon_id: str | None = None, url: str | None = None) -> ClusterSettings:
        """These settings with the daemon's id picked (if empty) and its URL filled in."""
        chosen = daemon_id or self.daemon_id or default_daemon_id()
        return msgspec.structs.replace(self, daemon_id=chosen, daemon_url=url or self.daemon_url)

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for ``nats.connect`` (credentials and TLS), checked here."""
        options: dict[str, Any] = {}
        if self.nats_token:
            options["token"] = self.nats_token
        if self.nats_user:
            options["user"] = self.nats_user
            options["password"] = self.nats_password or ""
        if self.nats_creds:
            _readable(self.nats_creds, "nats_creds")
            options["user_credentials"] = self.nats_creds
        if self.nats_tls_ca or self.nats_tls_cert:
            options["tls"] = self._tls_context()
        return options

    def _tls_context(self) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(cafile=self.nats_tls_ca)
            if self.nats_tls_cert and self.nats_tls_key:
                context.load_cert_chain(self.nats_tls_cert, self.nats_tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ClusterError(f"cannot load the NATS TLS files: {exc}") from exc
        return context


def check_id(name: str, value: str) -> None:
    """A cluster or daemon id: it becomes part of NATS subjects and bucket names."""
    if not _TOKEN.fullmatch(value):
        raise ClusterError(
            f"{name} {value!r}: use 1-64 letters, digits, '_' or '-' "
            "(it becomes part of NATS subjects and bucket names)"
        )


_LOOPBACK_NAMES: Final = frozenset({"localhost", "localhost.localdomain"})


def _check_server(url: str) -> None:
    """One NATS URL: a scheme and a host, and no user-info (secrets have no flag)."""
    try:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError as exc:  # "[2J" (an unclosed IPv6 bracket), a port that is no number
        raise ClusterError(f"NATS URL {url!r} is not a URL ({exc})") from None
    if "@" in parts.netloc:
        # The message must not repeat what it refuses: the user-info is a secret.
        shown = f"{parts.scheme}://…@{parts.netloc.rpartition('@')[2]}"
        raise ClusterError(
            f"the NATS URL {shown} carries credentials (user:password@ or token@), which "
            "would show wherever the URL does: give them as $MESH_NATS_USER and "
            "$MESH_NATS_PASSWORD, $MESH_NATS_TOKEN, or a .creds file (--nats-creds), "
            "or in the settings file (docs/cluster.md#credentials)"
        )
    if parts.scheme not in ("nats", "tls", "ws", "wss"):
        raise ClusterError(f"NATS URL {url!r}: the scheme must be nats, tls, ws or wss")


def _refuse_open(servers: list[str], *, tls: bool) -> None:
    """No credentials: only a NATS on this machine, or one reached over TLS, may be joined."""
    for url in servers:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        if parts.scheme in ("tls", "wss") or tls or is_loopback(parts.hostname or ""):
            continue
        raise ClusterError(
            f"NATS at {parts.hostname} would be joined in plaintext with no credentials: "
            "anyone who reaches it could read every call between daemons and forge registry "
            "entries. Give credentials ($MESH_NATS_USER and $MESH_NATS_PASSWORD, "
            "$MESH_NATS_TOKEN or --nats-creds), use tls://, or set nats_allow_open "
            "(--nats-allow-open) to accept that (docs/cluster.md#credentials)"
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _readable(path: str, setting: str) -> None:
    if not Path(path).is_file():
        raise ClusterError(f"{setting}: no file at {path!r}")


def default_daemon_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:40] or "daemon"
    return f"{host}-{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class Names:
    """Every subject, bucket and stream of one cluster, as seen from one daemon."""

    cluster: str
    daemon: str

    @property
    def agents_bucket(self) -> str:
        return f"mesh-{self.cluster}-agents"

    @property
    def leases_bucket(self) -> str:
        return f"mesh-{self.cluster}-leases"

    @property
    def keys_bucket(self) -> str:
        """Every daemon's public key, by daemon id (no TTL; each daemon writes its own)."""
        return f"mesh-{self.cluster}-keys"

    @property
    def inbox_prefix(self) -> str:
        """This daemon's reply subjects start with it: only this daemon may subscribe there."""
        return f"_INBOX_mesh.{self.cluster}.{self.daemon}"

    def inbox_of(self, daemon: str) -> str:
        return f"_INBOX_mesh.{self.cluster}.{daemon}"

    @property
    def rooms_stream(self) -> str:
        return f"mesh-{self.cluster}-rooms"

    @property
    def rooms_subjects(self) -> str:
        return f"mesh.{self.cluster}.rooms.>"

    def room_subject(self, room_id: str) -> str:
        return f"mesh.{self.cluster}.rooms.{room_id}"

    def room_of(self, subject: str) -> str:
        return subject.removeprefix(f"mesh.{self.cluster}.rooms.")

    def calls(self, daemon: str | None = None) -> str:
        """Where a daemon reads the frames of its links with the other daemons: their calls
        and room control, and their answers to its own."""
        return f"mesh.{self.cluster}.call.{daemon or self.daemon}"

    def room_live(self, daemon: str | None = None) -> str:
        """Where a daemon publishes the pieces of the replies its rooms are writing."""
        return f"mesh.{self.cluster}.room-live.{daemon or self.daemon}"


AGENT_PREFIX: Final = "agent."
DAEMON_PREFIX: Final = "daemon."


def agent_key(daemon: str, agent_id: str) -> str:
    """The agents-bucket key of an agent ``daemon`` holds: ``agent.<daemon>.<id>``, the holder
    first so that NATS can let each daemon write its own keys only (odd ids are
    base64url-encoded)."""
    if _PLAIN_KEY.fullmatch(agent_id):
        return f"{AGENT_PREFIX}{daemon}.{agent_id}"
    encoded = base64.urlsafe_b64encode(agent_id.encode()).decode().rstrip("=")
    return f"{AGENT_PREFIX}{daemon}.{_ENCODED}{encoded}"


def key_agent(key: str) -> tuple[str, str]:
    """The holder and the agent id back from a key (the inverse of :func:`agent_key`);
    ValueError for a key that is not one."""
    daemon, dot, body = key.removeprefix(AGENT_PREFIX).partition(".")
    if not dot or not body or not _TOKEN.fullmatch(daemon):
        raise ValueError(f"not an agent key: {key!r}")
    if not body.startswith(_ENCODED):
        return daemon, body
    data = body[1:]
    try:
        raw = base64.b64decode(data + "=" * (-len(data) % 4), altchars=b"-_", validate=True)
        return daemon, raw.decode()
    except (ValueError, UnicodeDecodeError) as exc:  # binascii.Error is a ValueError
        raise ValueError(f"not an agent key: {key!r} ({exc})") from None
