"""A nats-server configuration that lets each daemon act in its own name only.

NATS is the boundary between daemons, so each daemon's NATS user is allowed
what that daemon needs and nothing of another's: it **reads** only its own call
subject (the frames of its links with the other daemons) and its own inbox (so it
never sees calls or answers meant for another daemon), and every daemon's live reply pieces
(``mesh.C.room-live.*``, what any daemon's observers may be shown); it **writes**
only its own live pieces and its own keys of the keys and agents buckets
(``mesh.C.room-live.D``, ``$KV.mesh-C-keys.D``, ``agent.D.…`` and ``daemon.D``), may
publish to the other daemons' call subjects (that is how it calls them and
answers them) and inboxes, and may not purge,
update or delete a stream, or delete a stream's message, through the JetStream
API. What it may still write in any room's name (the leases, the rooms stream)
is signed, and a reader drops what the signer could not have written.

:func:`nats_config` prints it for a cluster id and its daemons (``mesh cluster
nats-config``); ``examples/nats/mesh-daemons.conf`` is its output for mesh
``mesh`` and daemons ``a`` and ``b``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from mesh.cluster._errors import ClusterError
from mesh.cluster._settings import Names, check_id

__all__ = ["nats_config", "password_variable"]

#: JetStream API verbs on a stream a daemon never needs and an attacker would use to
#: erase the record: refused even if a later allow would match them.
_DENIED_STREAM_VERBS: Final = ("PURGE", "DELETE", "UPDATE", "MSG.DELETE")


def password_variable(daemon: str) -> str:
    """The server's environment variable holding ``daemon``'s password."""
    return "MESH_DAEMON_" + re.sub(r"[^A-Za-z0-9]", "_", daemon).upper() + "_PASSWORD"


def nats_config(cluster_id: str, daemons: Sequence[str]) -> str:
    """The nats-server configuration for mesh ``cluster_id`` and these daemon ids (see the
    module docstring); passwords are read from the server's environment."""
    check_id("cluster_id", cluster_id)
    if not daemons:
        raise ClusterError("name at least one daemon (--daemon ID)")
    variables: dict[str, str] = {}
    for daemon in daemons:
        check_id("daemon_id", daemon)
        other = variables.setdefault(password_variable(daemon), daemon)
        if other != daemon:
            raise ClusterError(
                f"daemon ids {other!r} and {daemon!r} would share the password variable "
                f"${password_variable(daemon)}: use ids that differ in more than '-' and '_'"
                " or case"
            )
    lines = _header(cluster_id, daemons)
    for daemon in daemons:
        lines += _permissions(Names(cluster_id, daemon))
    lines += ["authorization: {", "  users: ["]
    lines += [
        f'    {{user: "daemon-{d}", password: ${password_variable(d)}, permissions: ${_block(d)}}}'
        for d in daemons
    ]
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def _block(daemon: str) -> str:
    return "MESH_DAEMON_" + re.sub(r"[^A-Za-z0-9]", "_", daemon).upper()


def _header(cluster_id: str, daemons: Sequence[str]) -> list[str]:
    ids = " ".join(f"--daemon {d}" for d in daemons)
    return [
        f'# A nats-server for the daemons of mesh "{cluster_id}": one user per daemon, each',
        "# allowed what that daemon needs and nothing in another daemon's name; nobody else",
        f"# is let in. Made by: mesh cluster nats-config --cluster-id {cluster_id} {ids}",
        "# Run it: nats-server -js -c THIS_FILE   (docs/cluster.md#an-example-nats-server)",
        "#",
        f"# Passwords come from the server's environment (${password_variable(daemons[0])}, ...),",
        "# so this file holds no secret.",
        "",
    ]


def _streams(names: Names) -> list[str]:
    return [
        f"KV_{names.keys_bucket}",
        f"KV_{names.agents_bucket}",
        f"KV_{names.leases_bucket}",
        names.rooms_stream,
    ]


def _permissions(names: Names) -> list[str]:
    """One daemon's permission block."""
    c, d = names.cluster, names.daemon
    publish = [
        "# the frames of its links to any daemon (calls, answers, cancels, room control),",
        "# and answers to any daemon's inbox",
        f'"mesh.{c}.call.*",',
        f'"{names.inbox_of("*")}.>",',
        "# the pieces of the replies its rooms are writing, on its own subject",
        f'"{names.room_live()}",',
        "# room events (signed; only the holder of a room's lease records there)",
        f'"{names.rooms_subjects}",',
        "# its own key, its own agents and daemon entry; any room's lease (signed)",
        f'"$KV.{names.keys_bucket}.{d}",',
        f'"$KV.{names.agents_bucket}.agent.{d}.>", "$KV.{names.agents_bucket}.daemon.{d}",',
        f'"$KV.{names.leases_bucket}.>",',
        "# the JetStream API for these streams: create, read, watch; never purge or delete",
        '"$JS.API.INFO",',
    ]
    for stream in _streams(names):
        publish += [
            f'"$JS.API.STREAM.CREATE.{stream}", "$JS.API.STREAM.INFO.{stream}",',
            f'"$JS.API.STREAM.MSG.GET.{stream}",',
            f'"$JS.API.DIRECT.GET.{stream}", "$JS.API.DIRECT.GET.{stream}.>",',
            f'"$JS.API.CONSUMER.CREATE.{stream}", "$JS.API.CONSUMER.CREATE.{stream}.>",',
            f'"$JS.API.CONSUMER.INFO.{stream}.*", "$JS.API.CONSUMER.DELETE.{stream}.*",',
            f'"$JS.FC.{stream}.>", "$JS.ACK.{stream}.>",',
        ]
    deny = [f'"$JS.API.STREAM.{verb}.>",' for verb in _DENIED_STREAM_VERBS]
    subscribe = [
        "# its own subjects and its own inbox, and every daemon's live reply pieces",
        f'"{names.calls()}",',
        f'"{names.inbox_prefix}.>",',
        f'"{names.room_live("*")}",',
    ]
    return [
        f'# What daemon "{d}" may publish and subscribe to.',
        f"{_block(d)}: {{",
        "  publish: {",
        "    allow: [",
        *_indent(publish, 6),
        "    ]",
        "    deny: [",
        *_indent(deny, 6),
        "    ]",
        "  }",
        "  subscribe: {",
        "    allow: [",
        *_indent(subscribe, 6),
        "    ]",
        "  }",
        "}",
        "",
    ]


def _indent(lines: list[str], width: int) -> list[str]:
    return [" " * width + line for line in lines]
