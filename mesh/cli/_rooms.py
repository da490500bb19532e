"""``mesh room run|show|export|join``: conversation rooms from the command line.

``run`` creates a room on the daemon and prints it live (coloured on a TTY) by
watching ``/rooms/{id}/events`` over WebSocket (resuming from the last event it
printed when the stream drops), until it stops; it prints the stop reason and
exits with the status that reason maps to (:data:`~mesh.cli._codes.ROOM_EXITS`).
Ctrl-C detaches and says how to stop the room, or stops it with
``--stop-on-interrupt``. ``show`` prints a room and its transcript; ``export``
writes it as Markdown or as the JSONL event log.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import quote

import anyio
import msgspec

from mesh.cli._codes import EXIT_INTERRUPTED, EXIT_UNREACHABLE, ROOM_EXITS
from mesh.cli._connection import add_connection_arguments, ssl_context, token_for
from mesh.cli._follow import follow_until_interrupted
from mesh.cli._join import cmd_room_join
from mesh.rooms import (
    MessageEvent,
    Room,
    RoomEvent,
    RoomSnapshot,
    decode_event,
    encode_event,
    format_event,
    transcript_markdown,
)

__all__ = ["add_room_commands"]

Request = Callable[..., Any]


def room_path(room_id: str, *rest: str) -> str:
    """``/rooms/{id}/...`` with the id escaped: ``../health`` names a room, not a route."""
    return "/".join(("", "rooms", quote(room_id, safe=""), *rest))


def cmd_room_run(args: argparse.Namespace, request: Request) -> int:
    body: dict[str, Any] = {"topic": args.topic, "members": args.agent, "mode": args.mode}
    if args.max_turns is not None:
        body["limits"] = {"max_turns": args.max_turns}
    if args.id:
        body["id"] = args.id
    created = request(args, "POST", "/rooms", body)
    room_id = created["room"]["id"]
    print(f"room {room_id}: {args.topic!r} with {', '.join(args.agent)}", file=sys.stderr)
    color = sys.stdout.isatty()

    def show(event: RoomEvent, room: Room | None) -> None:
        print(format_event(event, room=room, color=color), flush=True)

    followed = anyio.run(
        partial(
            follow_until_interrupted,
            args.url,
            room_id,
            show,
            token=token_for(args),
            ssl_context=ssl_context(args),
        )
    )
    if followed is None:
        return _interrupted(args, request, room_id)
    if followed.reason is None:
        print(f"mesh: room {room_id}: {followed.detail}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(f"room {room_id} stopped: {followed.reason} ({followed.detail})", file=sys.stderr)
    return ROOM_EXITS[followed.reason]


def _interrupted(args: argparse.Namespace, request: Request, room_id: str) -> int:
    if args.stop_on_interrupt:
        request(args, "POST", room_path(room_id, "stop"))
        print(f"mesh: interrupted; room {room_id} stopped", file=sys.stderr)
    else:
        print(
            f"mesh: interrupted; room {room_id} is still running on the daemon. "
            "Stop it with: curl -X POST -H 'Authorization: Bearer <token>' "
            f"{args.url.rstrip('/')}{room_path(room_id, 'stop')}",
            file=sys.stderr,
        )
    return EXIT_INTERRUPTED


def _snapshot(
    args: argparse.Namespace, request: Request
) -> tuple[RoomSnapshot, list[MessageEvent]]:
    shown = request(args, "GET", room_path(args.room))
    snapshot = msgspec.convert(shown["room"], RoomSnapshot)
    messages = [msgspec.convert(m, MessageEvent) for m in shown["transcript"]]
    return snapshot, messages


def cmd_room_show(args: argparse.Namespace, request: Request) -> int:
    snapshot, messages = _snapshot(args, request)
    room = snapshot.room
    print(f"room {snapshot.id}: {room.topic!r} — {snapshot.status}", end="")
    print(f" ({snapshot.stop_reason}: {snapshot.detail})" if snapshot.stop_reason else "")
    print("members: " + ", ".join(f"{m.name} ({m.role})" for m in room.members))
    for message in messages:
        print(format_event(message, room=room, color=sys.stdout.isatty()))
    return 0


def cmd_room_export(args: argparse.Namespace, request: Request) -> int:
    if args.format == "md":
        snapshot, messages = _snapshot(args, request)
        sys.stdout.write(transcript_markdown(snapshot, messages))
        return 0
    events = request(args, "GET", room_path(args.room, "events"))["events"]
    for event in events:
        sys.stdout.write(encode_event(decode_event(msgspec.json.encode(event))).decode() + "\n")
    return 0


def add_room_commands(
    sub: Any, client: Callable[[str, str], argparse.ArgumentParser], request: Request
) -> None:
    room = client("room", "conversation rooms: run one, show one, export one")
    commands = room.add_subparsers(dest="room_command", required=True, metavar="ROOM_COMMAND")
    url_default = room.get_default("url")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text, description=help_text)
        add_connection_arguments(parser, url_default=url_default)
        return parser

    run = command("run", "start a room and print it live until it stops")
    run.add_argument("--topic", required=True)
    run.add_argument("--agent", action="append", required=True, help="a member (twice or more)")
    run.add_argument("--max-turns", type=int)
    run.add_argument("--mode", choices=("chat", "review"), default="chat")
    run.add_argument("--id", help="the room's id (default: generated)")
    run.add_argument(
        "--stop-on-interrupt",
        action="store_true",
        help="Ctrl-C stops the room too (by default it detaches and the room runs on)",
    )
    run.set_defaults(func=lambda a: cmd_room_run(a, request))

    show = command("show", "print a room and its transcript")
    show.add_argument("room")
    show.set_defaults(func=lambda a: cmd_room_show(a, request))

    export = command("export", "write a room's transcript")
    export.add_argument("room")
    export.add_argument("--format", choices=("md", "jsonl"), default="md")
    export.set_defaults(func=lambda a: cmd_room_export(a, request))

    join = command("join", "take part in a room as a person (lines you type are sent)")
    join.add_argument("room")
    join.add_argument("--as", dest="as_name", required=True, metavar="NAME", help="your name")
    join.set_defaults(func=lambda a: cmd_room_join(a, request))
