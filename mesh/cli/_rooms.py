"""``mesh room run|show|export|join``: conversation rooms from the command line.

``run`` creates a room on the daemon and prints it live (coloured on a TTY) by
watching ``/rooms/{id}/events`` over WebSocket, until it stops; it prints the stop
reason. ``show`` prints a room and its transcript; ``export`` writes it as
Markdown or as the JSONL event log.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import anyio
import msgspec

from mesh.cli._connection import add_connection_arguments, ssl_context, token_for, ws_url
from mesh.cli._join import cmd_room_join
from mesh.rooms import (
    MessageEvent,
    Room,
    RoomSnapshot,
    StoppedEvent,
    WelcomeEvent,
    decode_event,
    encode_event,
    format_event,
    transcript_markdown,
)
from transports import TransportClosed, open_websocket

__all__ = ["add_room_commands"]

Request = Callable[..., Any]


async def _follow(args: argparse.Namespace, room_id: str, color: bool) -> str:
    """Print a room's events as they happen; returns the stop reason."""
    room: Room | None = None
    url = f"{ws_url(args.url)}/rooms/{room_id}/events"
    async with open_websocket(url, token=token_for(args), ssl_context=ssl_context(args)) as stream:
        while True:
            try:
                event = decode_event(await stream.receive())
            except TransportClosed as closed:
                return f"observer closed: {closed.reason}"
            if isinstance(event, WelcomeEvent):
                room = event.room
            print(format_event(event, room=room, color=color), flush=True)
            if isinstance(event, StoppedEvent):
                return str(event.reason)


def cmd_room_run(args: argparse.Namespace, request: Request) -> int:
    body: dict[str, Any] = {"topic": args.topic, "members": args.agent, "mode": args.mode}
    if args.max_turns is not None:
        body["limits"] = {"max_turns": args.max_turns}
    if args.id:
        body["id"] = args.id
    created = request(args, "POST", "/rooms", body)
    room_id = created["room"]["id"]
    print(f"room {room_id}: {args.topic!r} with {', '.join(args.agent)}", file=sys.stderr)
    reason = anyio.run(_follow, args, room_id, sys.stdout.isatty())
    print(f"room {room_id} stopped: {reason}", file=sys.stderr)
    return 0


def _snapshot(
    args: argparse.Namespace, request: Request
) -> tuple[RoomSnapshot, list[MessageEvent]]:
    shown = request(args, "GET", f"/rooms/{args.room}")
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
    events = request(args, "GET", f"/rooms/{args.room}/events")["events"]
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
