"""``mesh mcp login AGENT``: the one step of OAuth a daemon cannot do alone.

A mounted MCP server whose manifest has ``[transport.oauth]`` with the default
``authorization_code`` grant needs a person to consent once: this prints the
authorization URL (and opens a browser when there is one), takes the answer on a
loopback redirect, and keeps the grant where the daemon reads it (``--data-dir``,
the daemon's ``data_dir``). The daemon then refreshes it unattended.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from mesh.cli._codes import EXIT_DENIED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, fail

__all__ = ["add_login_arguments", "cmd_mcp_login"]


def add_login_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=("login",), help="authorize a server")
    parser.add_argument(
        "login_agent", nargs="?", metavar="agent", help="the mounted server's id (with login)"
    )
    parser.add_argument(
        "--manifests",
        default=os.environ.get("MESH_MANIFESTS", "manifests"),
        help="the daemon's manifest directory (default $MESH_MANIFESTS, else manifests)",
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("MESH_DATA_DIR", ".mesh"),
        help="the daemon's data_dir, where the grant is kept (default $MESH_DATA_DIR, else .mesh)",
    )
    parser.add_argument(
        "--no-browser", action="store_true", help="print the URL only; do not open a browser"
    )


def cmd_mcp_login(args: argparse.Namespace) -> int:
    import anyio
    import httpx

    from mesh._errors import Unauthorized
    from mesh.manifests import HttpSection, ManifestError, load_manifests
    from mesh.mcp._oauth import login, oauth_settings

    if not args.login_agent:
        fail(EXIT_USAGE, "usage: mesh mcp login AGENT (a mounted MCP server's id)")
    loaded = load_manifests(args.manifests)
    manifest = loaded.manifests.get(args.login_agent)
    if manifest is None:
        fail(EXIT_USAGE, f"no manifest in {args.manifests} defines agent {args.login_agent!r}")
    transport = manifest.transport
    if not isinstance(transport, HttpSection) or transport.oauth is None:
        fail(
            EXIT_USAGE,
            f"agent {args.login_agent!r} has no [transport.oauth] in its manifest:"
            " only an MCP server mounted over http with oauth needs a login",
        )
    try:
        settings = oauth_settings(args.login_agent, transport, None)
    except ManifestError as exc:
        fail(EXIT_USAGE, str(exc))
    assert settings is not None
    settings = dataclasses.replace(settings, data_dir=args.data_dir)

    async def show(url: str) -> None:
        print(
            f"Open this URL to authorize {args.login_agent!r}:\n{url}", file=sys.stderr, flush=True
        )
        if not args.no_browser:
            import webbrowser  # with subprocess and shutil: for this command alone

            await anyio.to_thread.run_sync(webbrowser.open, url)

    try:
        path = anyio.run(lambda: login(transport.endpoint, settings, open_url=show))
    except Unauthorized as exc:
        fail(EXIT_DENIED, str(exc))
    except httpx.HTTPError as exc:
        fail(
            EXIT_UNREACHABLE,
            f"cannot reach {transport.endpoint} or its authorization server: {exc}",
        )
    print(f"authorized: the grant for {args.login_agent!r} is kept in {path}", file=sys.stderr)
    return EXIT_OK
