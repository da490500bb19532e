"""How the CLI reaches a daemon: its URL, the token it presents, the CA it trusts.

The token is found with nothing handled by hand: ``$MESH_TOKEN``, else the
admin token the daemon wrote into its data directory (``$MESH_DATA_DIR``, else
``.mesh`` — where ``mesh serve`` keeps it when started in the same directory).
``--token-file`` names another file. For ``https://`` daemons with a private CA,
``--ca`` (or ``$MESH_CA``) names the CA bundle; the system's CAs are used otherwise.
"""

from __future__ import annotations

import argparse
import os
import ssl
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from mesh._input import MalformedToken, bearer_token, find_token
from mesh.cli._codes import EXIT_DENIED, EXIT_USAGE, fail

__all__ = [
    "DEFAULT_URL",
    "add_connection_arguments",
    "auth_headers",
    "daemon_url",
    "ssl_context",
    "token_for",
    "ws_url",
]

DEFAULT_URL: Final = "http://127.0.0.1:8700"


def add_connection_arguments(parser: argparse.ArgumentParser, *, url_default: str) -> None:
    parser.add_argument(
        "--url",
        type=daemon_url,
        default=url_default,
        help=f"the daemon (default $MESH_URL or {DEFAULT_URL})",
    )
    parser.add_argument(
        "--token-file",
        default=os.environ.get("MESH_TOKEN_FILE"),
        help="file holding the token (default $MESH_TOKEN, else .mesh/admin.token)",
    )
    parser.add_argument(
        "--ca",
        default=os.environ.get("MESH_CA"),
        help="CA bundle (PEM) to trust for an https:// daemon (default $MESH_CA)",
    )


def daemon_url(text: str) -> str:
    """An argparse type: an ``http(s)://host[:port]`` URL (also checks ``$MESH_URL``)."""
    try:
        parts = urlsplit(text.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a daemon URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a daemon URL: give http://HOST:PORT or https://HOST:PORT "
            "(--url or $MESH_URL)"
        )
    try:  # what the resolver is given: a label over 63 characters, or an empty one, is not
        parts.hostname.encode("idna")
    except UnicodeError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a daemon URL: its host is not a DNS name ({exc})"
        ) from None
    return text.strip()


def token_for(args: argparse.Namespace) -> str | None:
    """The token to present, or None; one that cannot be a token (a stray space, a file of
    many lines) exits 8 saying so, never printing it."""
    path = getattr(args, "token_file", None)
    try:
        return _token_file(path) if path else _found_token()
    except MalformedToken as exc:
        fail(EXIT_DENIED, str(exc))


def _token_file(path: str) -> str | None:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        fail(EXIT_USAGE, f"cannot read --token-file {path!r} ($MESH_TOKEN_FILE): {exc.strerror}")
    return bearer_token(text, f"--token-file {path!r}") if text.strip() else None


def _found_token() -> str | None:
    return find_token()


def auth_headers(args: argparse.Namespace) -> dict[str, str]:
    token = token_for(args)
    return {"Authorization": f"Bearer {token}"} if token else {}


def ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The context for an https:// or wss:// daemon (None: plain, or the system's CAs)."""
    ca = getattr(args, "ca", None)
    if not ca:
        return None
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:  # not there, not readable, not PEM
        fail(EXIT_USAGE, f"cannot use --ca {ca!r} (or $MESH_CA) as a CA bundle: {exc}")


def ws_url(http_url: str) -> str:
    """``http(s)://host:port`` → ``ws(s)://host:port``."""
    return "ws" + http_url.rstrip("/").removeprefix("http")
