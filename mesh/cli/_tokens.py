"""``mesh token create|list|revoke``: manage the daemon's tokens while it runs.

They go through the daemon's admin routes (``POST/GET /tokens``, ``DELETE
/tokens/{id}``), so a change is live at once, a revoked token's connections
close, and the daemon stays the only writer of its token file. They need an
admin token: the one ``mesh serve`` wrote into ``.mesh/admin.token`` is found
by default. ``create`` prints the new token once, alone on stdout (its note goes to
stderr); it is stored only hashed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from mesh._text import printable
from mesh.cli._connection import add_connection_arguments

__all__ = ["add_token_commands"]

Request = Callable[..., Any]


def cmd_token_create(args: argparse.Namespace, request: Request) -> int:
    body = {"role": args.role, "name": args.name, "agent": args.agent}
    created = request(args, "POST", "/tokens", body)
    if args.json:
        print(json.dumps(created, indent=2))
        return 0
    # The token alone on stdout, so `mesh token create ... > file` writes a usable token file;
    # the note is for the person at the terminal.
    print(created["token"], flush=True)
    role = created["role"] + (f" for agent {created['agent']}" if created["agent"] else "")
    note = f"token {created['id']} ({created['name']}, {role}): shown once, keep it"
    print(f"mesh: {printable(note)}", file=sys.stderr)
    return 0


def cmd_token_list(args: argparse.Namespace, request: Request) -> int:
    tokens = request(args, "GET", "/tokens")["tokens"]
    if args.json:
        print(json.dumps(tokens, indent=2))
        return 0
    rows = [("ID", "NAME", "ROLE", "AGENT")]
    rows += [(t["id"], t["name"], t["role"], t["agent"] or "") for t in tokens]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_token_revoke(args: argparse.Namespace, request: Request) -> int:
    revoked = request(args, "DELETE", f"/tokens/{quote(args.token, safe='')}")["revoked"]
    for entry in revoked:
        print(f"revoked {entry['id']} ({entry['name']}, {entry['role']})")
    return 0


def add_token_commands(
    sub: Any, client: Callable[[str, str], argparse.ArgumentParser], request: Request
) -> None:
    token = client("token", "manage the daemon's tokens (needs an admin token)")
    commands = token.add_subparsers(dest="token_command", required=True, metavar="TOKEN_COMMAND")
    parents = {"url": token.get_default("url")}

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text, description=help_text)
        add_connection_arguments(parser, url_default=parents["url"])
        parser.add_argument("--json", action="store_true", help="print JSON")
        return parser

    create = command("create", "issue a token and print it (once)")
    create.add_argument("--role", choices=("admin", "client", "observer", "agent"), required=True)
    create.add_argument("--name", required=True, help="a label for lists and logs")
    create.add_argument("--agent", help="for --role agent: the agent id it may dial in as")
    create.set_defaults(func=lambda a: cmd_token_create(a, request))

    listing = command("list", "list tokens (ids, names, roles; never the tokens)")
    listing.set_defaults(func=lambda a: cmd_token_list(a, request))

    revoke = command("revoke", "revoke a token by id or name; its connections close")
    revoke.add_argument("token", metavar="ID_OR_NAME")
    revoke.set_defaults(func=lambda a: cmd_token_revoke(a, request))
