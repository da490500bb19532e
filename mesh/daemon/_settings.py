"""The daemon's settings: a TOML file, then ``MESH_*`` variables, then flags.

Besides where to listen and what to load, the settings hold every bound on what
a client controls (``docs/security.md`` lists each with its refusal). The
defaults are safe for a daemon on a laptop; raise them on purpose.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import msgspec

from mesh._errors import MeshError
from mesh._nats_settings import NatsSettings, variable_of

__all__ = [
    "ENV_SETTINGS",
    "DaemonSettings",
    "ListenError",
    "SettingsError",
    "cluster_settings",
    "load_settings",
]

#: Environment variables that set daemon settings (flags win over them, they win over the file).
ENV_SETTINGS: Final = {
    "MESH_HOST": "host",
    "MESH_PORT": "port",
    "MESH_MANIFESTS": "manifests",
    "MESH_DRAIN_TIMEOUT": "drain_timeout",
    "MESH_LOG_LEVEL": "log_level",
    "MESH_LOG_FORMAT": "log_format",
    "MESH_DATA_DIR": "data_dir",
    "MESH_TLS_CERT": "tls_cert",
    "MESH_TLS_KEY": "tls_key",
    # Joining a mesh of daemons over NATS (docs/cluster.md); secrets only here or in the file.
    **{variable_of(name): name for name in NatsSettings.__struct_fields__},
}
#: The settings that go to the cluster (mesh.cluster.ClusterSettings) when ``nats`` is set.
CLUSTER_SETTINGS: Final = NatsSettings.__struct_fields__

_Positive = Annotated[int, msgspec.Meta(gt=0)]
_Seconds = Annotated[float, msgspec.Meta(gt=0)]

#: The hosts an endpoint registered over HTTP may point at, by default: this machine.
LOOPBACK: Final = ("localhost", "127.0.0.0/8", "::1")


class DaemonSettings(NatsSettings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything ``mesh serve`` reads; the NATS settings (joining other daemons,
    docs/cluster.md) are inherited from :class:`~mesh._nats_settings.NatsSettings`."""

    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8700
    manifests: str = "manifests"
    #: SIGTERM waits this long for calls in flight before stopping anyway.
    drain_timeout: Annotated[float, msgspec.Meta(ge=0)] = 10.0
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    max_body_size: _Positive = 1 << 20
    #: Rooms (JSONL per room + SQLite) and tokens (tokens.json, admin.token) live here.
    data_dir: str = ".mesh"
    #: TLS on the daemon's port: a PEM certificate chain and its key (both or neither).
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Every WebSocket the daemon serves (agents, watchers, observers) is pinged this
    #: often, and closed with 1011 if the pong takes longer than ``ping_timeout``.
    ping_interval: _Seconds = 20.0
    ping_timeout: _Seconds = 20.0

    # -- bounds on what clients control (docs/security.md) --------------------------------
    #: Request line plus headers; a longer head is refused with 431.
    max_head_size: _Positive = 64 * 1024
    #: Connections open at once whose requests carry a valid token (HTTP and WebSocket),
    #: shared fairly: past it an idle keep-alive makes room, else the newest stream of the
    #: token holding the most (closed with 4029) if it would still hold more than the
    #: newcomer; else the request is refused with 503.
    max_connections: _Positive = 1000
    #: More connections only an admin token may take, so an operator can always get in.
    admin_connections: Annotated[int, msgspec.Meta(ge=0)] = 16
    #: Connections that have shown no valid token yet; the oldest not being answered
    #: is closed to make room for a new one (503 only if all are being answered).
    max_unauthenticated_connections: _Positive = 100
    #: Connections one token may hold (HTTP and WebSocket); admins are not bounded. Past
    #: it the token's oldest idle keep-alive makes room, or the request gets 429.
    max_connections_per_identity: _Positive = 128
    #: A new connection must send its first byte within this many seconds...
    first_byte_timeout: _Seconds = 10.0
    #: ...and its request head (line and headers) within this many after that.
    head_timeout: _Seconds = 10.0
    #: WebSockets one token may hold open at once (watchers, observers, /mcp, agents);
    #: admins are not bounded. More are closed with 4029.
    max_streams_per_identity: _Positive = 64
    #: MCP sessions over HTTP open at once; past it a new one is refused with 503.
    max_mcp_sessions: _Positive = 256
    #: MCP sessions over HTTP one token may hold; a new one ends its least recently used.
    max_mcp_sessions_per_identity: _Positive = 16
    #: Tokens the daemon holds at once (issued and not revoked); more are refused with 429.
    max_tokens: _Positive = 10_000
    #: The shortest heartbeat_interval an agent may register with (the daemon probes
    #: an endpoint that often).
    min_heartbeat_interval: _Seconds = 1.0
    #: A registration's metadata, as JSON, in bytes.
    max_metadata_size: _Positive = 16 * 1024
    #: Agents one identity may hold registered over HTTP at once.
    max_registrations_per_identity: _Positive = 100
    #: Hosts a registered endpoint may point at: names, addresses, CIDR networks, or "*".
    endpoint_hosts: tuple[str, ...] = LOOPBACK
    #: Hosts an A2A push notification webhook may be at, written as endpoint_hosts are.
    #: None by default: a client's webhook would make the daemon POST to whatever listens
    #: on those hosts (loopback included), so push is offered only where the operator says.
    webhook_hosts: tuple[str, ...] = ()
    #: A2A tasks the daemon keeps (in a2a.sqlite3 in data_dir, so GetTask answers after a
    #: restart); past it the oldest finished one is forgotten, and when none has finished
    #: a new message is refused.
    a2a_max_tasks: _Positive = 10_000
    #: A2A tasks one token keeps, of a2a_max_tasks: one client cannot take them all.
    a2a_max_tasks_per_identity: _Positive = 1_000
    #: Messages kept in each A2A task's history (GetTask's historyLength reads from these).
    a2a_task_history: _Positive = 64
    #: Finished A2A tasks older than this many seconds are forgotten; None keeps them
    #: (within a2a_max_tasks).
    a2a_task_retention: _Seconds | None = 7 * 24 * 3600.0
    #: Longest deadline, seconds, a caller may give a call: /rpc, /broadcast, an agent's
    #: mesh/call, a room's turn_timeout, A2A's metadata.timeout (the orchestrator's door).
    max_call_timeout: _Seconds = 300.0
    #: Rooms running or paused at once (admins may also take admin_rooms more).
    max_active_rooms: _Positive = 32
    #: More rooms running or paused that only an admin may start or resume, so an
    #: operator always can.
    admin_rooms: Annotated[int, msgspec.Meta(ge=0)] = 4
    #: The last this many of max_active_rooms' free slots go only to tokens with no room
    #: running or paused, so a few clients filling their shares leave room for others.
    newcomer_rooms: Annotated[int, msgspec.Meta(ge=0)] = 4
    #: Rooms running or paused at once that one token owns (admins: only the limits
    #: above), so that one client cannot hold every room slot.
    max_rooms_per_identity: _Positive = 8
    #: Rooms one token keeps in the store, finished ones included (admins: unbounded), so
    #: that making and stopping rooms in a loop cannot fill the disk; past it a new room is
    #: refused until the token deletes some (or room_retention does).
    max_rooms_kept_per_identity: _Positive = 1000
    #: The longest a room waits for a person, seconds: for the answer to their turn (a
    #: room's people.turn_timeout above it is cut to it), and for anyone to come back when
    #: only people who are away could speak; then it stops, resumably (AGENT_LOST).
    max_person_wait: _Seconds = 600.0
    #: A room's topic, in characters.
    max_topic_length: _Positive = 4096
    #: A room's max_turns (and max_messages_per_agent).
    max_room_turns: _Positive = 1000
    #: Members of one room.
    max_room_members: _Positive = 16
    #: Finished rooms older than this many seconds are deleted; None keeps them.
    room_retention: _Seconds | None = None

    def __post_init__(self) -> None:
        if self.a2a_max_tasks_per_identity > self.a2a_max_tasks:
            raise ValueError(
                f"a2a_max_tasks_per_identity ({self.a2a_max_tasks_per_identity}) must be at"
                f" most a2a_max_tasks ({self.a2a_max_tasks})"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        if self.newcomer_rooms == 0 and self.max_rooms_per_identity >= self.max_active_rooms:
            # Nothing would be left for anyone else once one token held its share.
            raise ValueError(
                f"max_rooms_per_identity ({self.max_rooms_per_identity}) must be below "
                f"max_active_rooms ({self.max_active_rooms}) when newcomer_rooms is 0: "
                "one token could hold every room slot"
            )


class ListenError(MeshError):
    """The daemon cannot listen where it was told to (port in use, no permission, bad host)."""


class SettingsError(MeshError):
    """A settings file, variable or flag that does not fit; says which and why."""


def _check_keys(table: Mapping[str, Any], path: Path) -> None:
    """Refuse a key the settings do not have, with the one it likely meant: a misspelt
    setting would otherwise say only that the object has an unexpected field."""
    from difflib import get_close_matches

    known = [field.encode_name for field in msgspec.structs.fields(DaemonSettings)]
    for key in table:
        if key not in known:
            close = get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "the settings are in docs/daemon.md"
            raise SettingsError(f"{path}: unknown setting {key!r}; {hint}")


def load_settings(
    config: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> DaemonSettings:
    """Settings from a TOML file, then ``MESH_*`` variables, then flags (``overrides``)."""
    merged: dict[str, Any] = {}
    source = "defaults"
    if config is not None:
        path = Path(config)
        try:
            merged.update(msgspec.toml.decode(path.read_bytes()))
        except OSError as exc:
            raise SettingsError(f"cannot read settings file {path}: {exc.strerror}") from None
        except msgspec.DecodeError as exc:
            raise SettingsError(f"{path}: {exc}") from None
        source = str(path)
        _check_keys(merged, path)
    env = environ if environ is not None else {}
    for variable, name in ENV_SETTINGS.items():
        if variable in env:
            merged[name] = env[variable]
            source = f"{source} + ${variable}"
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    merged.update(flags)
    source += " + flags" if flags else ""
    try:
        settings = msgspec.convert(merged, DaemonSettings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid settings ({source}): {exc}") from None
    if settings.nats:
        cluster_settings(settings)  # checked now, so a bad one stops `mesh serve` at once
    return settings


def cluster_settings(settings: DaemonSettings) -> Any:
    """The daemon's settings for ``mesh.cluster`` (a SettingsError if they do not fit)."""
    from mesh.cluster import ClusterError, ClusterSettings

    values = {name: getattr(settings, name) for name in CLUSTER_SETTINGS}
    try:
        return ClusterSettings(**values)
    except ClusterError as exc:
        raise SettingsError(f"invalid cluster settings: {exc}") from None
