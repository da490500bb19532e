"""``mesh room …``: conversation rooms from the command line.

``run`` creates a room on the daemon and prints it live (coloured on a TTY) by
watching ``/rooms/{id}/events`` over WebSocket (resuming from the last event it
printed when the stream drops), until it stops; it prints the stop reason and
exits with the status that reason maps to (:data:`ROOM_EXITS`).
Ctrl-C detaches and says how to stop the room, or stops it with
``--stop-on-interrupt``; with ``--paused`` it creates the room paused before its first
turn and returns, saying how to join, resume and watch it. ``watch`` follows a room
that exists the same way (from its first event, or after ``--since SEQ``). ``list``
and ``show`` read rooms, ``export`` writes a transcript as Markdown or as the JSONL
event log, and ``pause``, ``resume``, ``stop`` and ``delete`` steer one. Every command uses the
daemon's documented routes and the exit codes of :mod:`mesh.cli._codes` (a room
that does not exist is 4, one that cannot do what was asked, such as resuming a
finished room, is 1).

Text that agents or clients wrote is escaped before it reaches the terminal
(:mod:`mesh._text`); ``--json`` and ``export --format jsonl`` print exact JSON.
"""

from __future__ import annotations

import argparse
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from types import FrameType
from typing import Any, Final
from urllib.parse import quote, urlencode

import msgspec

from mesh._text import json_text, printable, safe_json
from mesh.cli._codes import (
    EXIT_DENIED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_ROOM_HALTED,
    EXIT_UNAVAILABLE,
    EXIT_UNREACHABLE,
    interrupted,
)
from mesh.cli._connection import add_connection_arguments, ssl_context, token_for
from mesh.rooms import (
    DEFAULT_MAX_TURNS,
    Limits,
    MessageEvent,
    Room,
    RoomEvent,
    RoomSnapshot,
    StopReason,
    decode_event,
    encode_event,
    format_event,
    transcript_markdown,
)

__all__ = ["add_room_commands"]

Request = Callable[..., Any]

#: Each member's message limit when the room does not set one.
PER_AGENT = Limits().max_messages_per_agent
#: ``mesh room run``'s exit status for each way a room stops.
ROOM_EXITS: Final = {
    StopReason.CONVERGED: EXIT_OK,
    StopReason.NO_IMPROVEMENT: EXIT_OK,
    StopReason.MAX_TURNS: EXIT_OK,
    StopReason.GOODBYE: EXIT_OK,
    StopReason.ERROR: EXIT_FAILED,
    StopReason.AGENT_LOST: EXIT_UNAVAILABLE,
    StopReason.PAUSED: EXIT_ROOM_HALTED,
    StopReason.STOPPED: EXIT_ROOM_HALTED,
}
#: Topics are cut to this many characters in ``mesh room list``.
TOPIC_WIDTH = 48


def room_path(room_id: str, *rest: str) -> str:
    """``/rooms/{id}/...`` with the id escaped: ``../health`` names a room, not a route."""
    return "/".join(("", "rooms", quote(room_id, safe=""), *rest))


def _follow(
    args: argparse.Namespace,
    room_id: str,
    since: int = 0,
    recorded: int = 0,
    *,
    through_pauses: bool = False,
) -> int | None:
    """Print the room's events until it stops; its exit status, or None on Ctrl-C."""
    # The WebSocket client and the event loop load here: `mesh room list` needs neither.
    import anyio

    from mesh.cli._follow import follow_until_interrupted

    color = sys.stdout.isatty()

    def show(event: RoomEvent, room: Room | None) -> None:
        print(format_event(event, room=room, color=color), flush=True)

    # Ctrl-C is the same whenever it comes: before the follower's own SIGINT handler is
    # in place (KeyboardInterrupt) or after (None from the follower).
    try:
        followed = anyio.run(
            partial(
                follow_until_interrupted,
                args.url,
                room_id,
                show,
                token=token_for(args),
                ssl_context=ssl_context(args),
                since=since,
                recorded=recorded,
                through_pauses=through_pauses,
            )
        )
    except KeyboardInterrupt:
        return None
    if followed is None:
        return None
    if followed.reason is None:
        print(f"mesh: room {printable(room_id)}: {printable(followed.detail)}", file=sys.stderr)
        return EXIT_DENIED if followed.denied else EXIT_UNREACHABLE
    stopped = f"{followed.reason} ({printable(followed.detail)})"
    print(f"room {printable(room_id)} stopped: {stopped}", file=sys.stderr)
    return ROOM_EXITS[followed.reason]


def cmd_room_run(args: argparse.Namespace, request: Request) -> int:
    body: dict[str, Any] = {"topic": args.topic, "members": args.agent, "mode": args.mode}
    limits = {"max_turns": args.max_turns, "max_messages_per_agent": args.max_messages_per_agent}
    if any(value is not None for value in limits.values()):
        body["limits"] = {key: value for key, value in limits.items() if value is not None}
    # The id is chosen here, so a Ctrl-C that comes before the daemon answers can still
    # name the room (the daemon starts a room it has recorded even if we hang up).
    room_id = body["id"] = args.id or f"room-{uuid.uuid4().hex[:12]}"
    if args.paused:
        body["paused"] = True
    try:
        with _sigint_deferred() as pressed:
            request(args, "POST", "/rooms", body)
    except KeyboardInterrupt:  # pressed twice: the creation's answer was not waited for
        return _interrupted_creating(args, room_id)
    if pressed:
        return _interrupted(args, request, room_id)
    members = ", ".join(printable(agent) for agent in args.agent)
    print(f'room {printable(room_id)}: "{printable(args.topic)}" with {members}', file=sys.stderr)
    if args.paused:
        return _created_paused(room_id)
    code = _follow(args, room_id)
    return _interrupted(args, request, room_id) if code is None else code


def _created_paused(room_id: str) -> int:
    """A room created paused says nothing until someone resumes it, so there is nothing
    to follow yet: say how to join it, resume it and watch it instead."""
    shown = printable(room_id)
    print(
        f"room {shown} is paused before its first turn. Join it with: mesh room join {shown} "
        f"--as NAME; start it with: mesh room resume {shown}; "
        f"follow it with: mesh room watch {shown} --follow",
        file=sys.stderr,
    )
    return EXIT_OK


@contextmanager
def _sigint_deferred() -> Iterator[list[int]]:
    """While the block runs, a first Ctrl-C is only noted (the list it yields gets an
    item) and a second one interrupts: the room being created is then either refused
    or known by its id, never half-seen."""
    pressed: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        if pressed:
            raise KeyboardInterrupt
        pressed.append(signum)

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted_creating(args: argparse.Namespace, room_id: str) -> int:
    shown = printable(room_id)
    return interrupted(
        f"room {shown} may have been created and run on the daemon. "
        f"Check with: mesh room show {shown}; stop it with: mesh room stop {shown}"
    )


def _interrupted(args: argparse.Namespace, request: Request, room_id: str) -> int:
    shown = printable(room_id)
    if args.stop_on_interrupt:
        request(args, "POST", room_path(room_id, "stop"))
        return interrupted(f"room {shown} stopped")
    return interrupted(
        f"room {shown} is still running on the daemon. "
        f"Stop it with: mesh room stop {shown} (POST {printable(room_path(room_id, 'stop'))})"
    )


def cmd_room_watch(args: argparse.Namespace, request: Request) -> int:
    # A missing room is exit 4, before any WebSocket; a stop before the room's last event
    # was a pause since resumed, not where following ends.
    shown = request(args, "GET", room_path(args.room))
    recorded = shown["room"].get("last_seq", 0)
    code = _follow(args, args.room, args.since, recorded, through_pauses=args.follow)
    if code is None:
        return interrupted(f"room {printable(args.room)} runs on")
    return code


def _snapshot(
    args: argparse.Namespace, request: Request
) -> tuple[RoomSnapshot, list[MessageEvent]]:
    shown = request(args, "GET", room_path(args.room))
    snapshot = msgspec.convert(shown["room"], RoomSnapshot)
    messages = [msgspec.convert(m, MessageEvent) for m in shown["transcript"]]
    return snapshot, messages


def _status_line(snapshot: RoomSnapshot) -> str:
    line = f"{snapshot.status}"
    if snapshot.stop_reason:
        line += f" ({snapshot.stop_reason}: {printable(snapshot.detail)})"
    return line


def cmd_room_show(args: argparse.Namespace, request: Request) -> int:
    snapshot, messages = _snapshot(args, request)
    room = snapshot.room
    print(f'room {printable(snapshot.id)}: "{printable(room.topic)}" — {_status_line(snapshot)}')
    members = ", ".join(f"{printable(m.name)} ({printable(m.role)})" for m in room.members)
    print(f"members: {members}")
    for message in messages:
        print(format_event(message, room=room, color=sys.stdout.isatty()))
    return 0


def cmd_room_export(args: argparse.Namespace, request: Request) -> int:
    if args.format == "md":
        snapshot = msgspec.convert(request(args, "GET", room_path(args.room))["room"], RoomSnapshot)
        # Every event, not the transcript alone: a pause and a resume belong to the record.
        logged = request(args, "GET", room_path(args.room, "events"))["events"]
        events = [decode_event(msgspec.json.encode(event)) for event in logged]
        sys.stdout.write(transcript_markdown(snapshot, events))
        return 0
    events = request(args, "GET", room_path(args.room, "events"))["events"]
    for event in events:
        line = encode_event(decode_event(msgspec.json.encode(event))).decode()
        sys.stdout.write(safe_json(line) + "\n")
    return 0


def cmd_room_list(args: argparse.Namespace, request: Request) -> int:
    page = {"limit": args.limit} | ({"before": args.before} if args.before else {})
    listed = request(args, "GET", f"/rooms?{urlencode(page)}")
    rooms = listed["rooms"]
    if args.json:  # what GET /rooms answers, so a script reads either the same way
        print(json_text(listed, indent=2))
        return 0
    if listed.get("next"):
        more = f"older rooms: mesh room list --before {printable(listed['next'])}"
        print(more, file=sys.stderr)
    rows = [("ID", "STATUS", "TURN", "MEMBERS", "TOPIC")]
    for shown in rooms:
        snapshot = msgspec.convert(shown, RoomSnapshot)
        room = snapshot.room
        topic = printable(room.topic.replace("\n", " "))
        if len(topic) > TOPIC_WIDTH:
            topic = topic[: TOPIC_WIDTH - 1] + "…"
        status = str(snapshot.status)
        if snapshot.stop_reason:
            status += f" ({snapshot.stop_reason})"
        members = ",".join(printable(m.id) for m in room.members)
        rows.append((printable(snapshot.id), status, str(snapshot.current_turn), members, topic))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _steer(verb: str) -> Callable[[argparse.Namespace, Request], int]:
    def command(args: argparse.Namespace, request: Request) -> int:
        steered = request(args, "POST", room_path(args.room, verb))
        snapshot = msgspec.convert(steered, RoomSnapshot)
        print(f"room {printable(snapshot.id)}: {_status_line(snapshot)}")
        return 0

    return command


def cmd_room_delete(args: argparse.Namespace, request: Request) -> int:
    request(args, "DELETE", room_path(args.room))
    print(f"room {printable(args.room)} deleted")
    return 0


def cmd_room_join(args: argparse.Namespace, request: Request) -> int:
    """``mesh room join``, whose console, HTTP client and WebSocket load when it runs."""
    from mesh.cli._join import cmd_room_join as join

    return join(args, request)


def cmd_room_answer(args: argparse.Namespace, request: Request) -> int:
    """``mesh room answer``, whose question-and-answer rules load when it runs."""
    from mesh.cli._answer import cmd_room_answer as answer

    return answer(args, request)


def add_room_commands(room: argparse.ArgumentParser, request: Request) -> None:
    """``mesh room``'s commands, under its parser."""
    commands = room.add_subparsers(dest="room_command", required=True, metavar="ROOM_COMMAND")
    url_default = room.get_default("url")

    def command(
        name: str, help_text: str, run: Callable[[argparse.Namespace, Request], int]
    ) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text, description=help_text)
        add_connection_arguments(parser, url_default=url_default)
        parser.set_defaults(func=lambda a: run(a, request))
        return parser

    run = command("run", "start a room and print it live until it stops", cmd_room_run)
    run.set_defaults(runs_library=True)  # it follows the room with the library's WebSocket
    run.add_argument("--topic", required=True)
    run.add_argument("--agent", action="append", required=True, help="a member (twice or more)")
    run.add_argument(
        "--max-turns",
        type=int,
        metavar="N",
        help=f"messages in a chat, rounds in a review (default {DEFAULT_MAX_TURNS['chat']} and "
        f"{DEFAULT_MAX_TURNS['review']})",
    )
    run.add_argument(
        "--max-messages-per-agent",
        type=int,
        metavar="N",
        help=f"each member speaks at most N times (default {PER_AGENT}); the room stops when no "
        "one but the last speaker may speak",
    )
    run.add_argument("--mode", choices=("chat", "review"), default="chat")
    run.add_argument("--id", help="the room's id (default: generated)")
    run.add_argument(
        "--paused",
        action="store_true",
        help="create the room paused before its first turn and return (join it, then resume it)",
    )
    run.add_argument(
        "--stop-on-interrupt",
        action="store_true",
        help="Ctrl-C stops the room too (by default it detaches and the room runs on)",
    )

    watch = command("watch", "print a room's events live until it stops", cmd_room_watch)
    watch.set_defaults(runs_library=True)
    watch.add_argument("room")
    watch.add_argument(
        "--since", type=int, default=0, metavar="SEQ", help="start after this event (default: all)"
    )
    watch.add_argument(
        "--follow",
        action="store_true",
        help="follow through pauses until the room stops for good (default: a pause ends it)",
    )

    listing = command("list", "the rooms the daemon holds, newest first", cmd_room_list)
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.add_argument(
        "--limit", type=int, default=100, metavar="N", help="rooms to show, 1 to 1000 (100)"
    )
    listing.add_argument(
        "--before", metavar="CURSOR", help="the rooms older than this (a listing's next)"
    )

    show = command("show", "print a room and its transcript", cmd_room_show)
    show.add_argument("room")

    export = command("export", "write a room's transcript", cmd_room_export)
    export.add_argument("room")
    export.add_argument("--format", choices=("md", "jsonl"), default="md")

    for verb, help_text in (
        ("pause", "pause a running room (the turn in flight is asked again on resume)"),
        ("resume", "continue a paused room, or one stopped by AGENT_LOST or ERROR"),
        ("stop", "stop a room for good"),
    ):
        command(verb, help_text, _steer(verb)).add_argument("room")

    command("delete", "delete a finished room and its transcript", cmd_room_delete).add_argument(
        "room"
    )

    join = command(
        "join", "take part in a room as a person (lines you type are sent)", cmd_room_join
    )
    join.set_defaults(runs_library=True)
    join.add_argument("room")
    join.add_argument("--as", dest="as_name", required=True, metavar="NAME", help="your name")

    answer = command(
        "answer", "answer a question a member put to the room's people", cmd_room_answer
    )
    answer.add_argument("room")
    answer.add_argument("question", help="the question's id (q3-1), as the room shows it")
    answer.add_argument(
        "fields", nargs="*", metavar="FIELD=VALUE", help="the answer's fields (to accept)"
    )
    answer.add_argument("--as", dest="as_name", required=True, metavar="NAME", help="your name")
    refusal = answer.add_mutually_exclusive_group()
    refusal.add_argument("--decline", action="store_true", help="decline the question")
    refusal.add_argument("--cancel", action="store_true", help="cancel the question")
