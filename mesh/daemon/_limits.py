"""Checks on what clients send the daemon, each refusal naming its rule or limit.

An endpoint registered over HTTP is a URL the daemon will POST to on the
registrant's behalf, so it must not be a way to make the daemon reach anywhere
else (request forgery): plain ``http``/``https``, no user-info (the daemon would
present it), no query or fragment (the daemon appends ``/rpc`` to the path), and
a host in the ``endpoint_hosts`` allow-list. Hosts are compared as written, never
resolved: a name is allowed only if the list names it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Final
from urllib.parse import urlsplit

__all__ = ["check_endpoint", "check_id", "host_allowed"]

# The manifest id rule (mesh/manifests/_types.py): 1-64 of a-z 0-9 . _ -, alnum first.
_ID: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def check_id(agent_id: str) -> str | None:
    """Why ``agent_id`` is not a valid id (the manifest rules), or None."""
    if _ID.fullmatch(agent_id):
        return None
    return (
        f"agent id {agent_id[:80]!r} breaks the manifest id rule: 1-64 of lowercase "
        "letters, digits, `.`, `_`, `-`, starting with a letter or digit"
    )


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    host = host.lower().rstrip(".")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in allowed:
        if entry == "*" or entry.lower() == host:
            return True
        if address is None or not any(c in entry for c in ".:"):
            continue
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue  # a host name in the list, not a network
    return False


def check_endpoint(url: str, allowed: Sequence[str], setting: str = "endpoint_hosts") -> str | None:
    """Why the daemon will not call ``url`` for a registrant, or None. Never echoes the URL:
    it may hold a credential. ``setting`` names the allow-list ``allowed`` is."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError as exc:
        return f"endpoint is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "endpoint must be an http:// or https:// URL"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "endpoint must not carry user-info (user:password@)"
    if parts.query or "?" in url:
        return "endpoint must not carry a query string (the daemon appends /rpc to its path)"
    if parts.fragment or "#" in url:
        return "endpoint must not carry a fragment"
    if not parts.hostname:
        return "endpoint must name a host"
    if not host_allowed(parts.hostname, allowed):
        return (
            f"endpoint host {parts.hostname!r} is not in the daemon's {setting} "
            f"allow-list ({', '.join(allowed)})"
        )
    return None
