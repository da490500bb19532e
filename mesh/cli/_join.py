"""``mesh room join ID --as NAME``: take part in a room from a terminal, as a person.

Joins the room (a seat of kind ``human``, or yours again), prints the room as it
goes (its history first), tells you when the room waits for you, and sends each
line you type: the answer to your turn, or, between turns, an interjection the
room records after the turn in flight. End of input (Ctrl-D) or Ctrl-C leaves the
room; the command also ends when the room stops for good. A member's question to
the room's people is printed with how to answer it: a line ``/answer QUESTION
FIELD=VALUE ...``, ``/decline QUESTION`` or ``/cancel QUESTION`` answers it
(:mod:`mesh.cli._answer`).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import quote

import anyio
import httpx

from mesh._text import printable
from mesh.cli._answer import AnswerWordsError, answer_body, question_hint
from mesh.cli._codes import interrupted
from mesh.cli._connection import auth_headers, ssl_context, token_for, ws_url
from mesh.rooms import (
    DeltaEvent,
    QuestionEvent,
    Room,
    StoppedEvent,
    StopReason,
    WelcomeEvent,
    decode_live_event,
    format_event,
)
from transports import TransportClosed, open_websocket

__all__ = ["cmd_room_join"]

Request = Callable[..., Any]


def room_path(room_id: str) -> str:
    """``/rooms/{id}`` with the id escaped: ``../health`` names a room, not a route."""
    return f"/rooms/{quote(room_id, safe='')}"


#: The name of the thread that reads the person's lines.
READER: Final = "mesh-room-join-stdin"
#: Sending one line to the daemon: it answers at once (the engine records it later).
SAY_TIMEOUT: Final = 15.0


def cmd_room_join(args: argparse.Namespace, request: Request) -> int:
    path = room_path(args.room)
    joined = request(args, "POST", f"{path}/join", {"name": args.as_name})
    member = joined["member"]
    print(
        f"joined room {args.room} as {member['name']}: type a message and press Enter "
        "(between turns it is an interjection); Ctrl-D leaves",
        file=sys.stderr,
    )
    reason: str | None = None
    stopped_by_user = False
    try:
        reason = anyio.run(_take_part, args, member["id"], sys.stdout.isatty())
    except KeyboardInterrupt:
        stopped_by_user = True
    finally:
        if reason is None:
            request(args, "POST", f"{path}/leave", {"member": member["id"]})
    if stopped_by_user:
        code = interrupted(f"left room {printable(args.room)}")
    else:
        print(f"room {args.room} stopped: {reason}" if reason else "left the room", file=sys.stderr)
        code = 0
    _leave_the_reader_behind(code)
    return code


def _leave_the_reader_behind(code: int) -> None:
    """End the process now if a thread is still blocked reading stdin (Ctrl-C, or the room
    stopped, while the person was typing): the interpreter would wait at exit for a line
    that never comes, since no thread blocked on a terminal can be interrupted."""
    if any(thread.name == READER for thread in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


async def _take_part(args: argparse.Namespace, member: str, color: bool) -> str | None:
    outcome: list[str | None] = [None]
    tls = ssl_context(args)
    async with (
        httpx.AsyncClient(
            base_url=args.url,
            headers=auth_headers(args),
            timeout=SAY_TIMEOUT,
            verify=tls if tls is not None else True,
        ) as http,
        anyio.create_task_group() as tg,
    ):
        asked: dict[str, Mapping[str, Any]] = {}  # question id -> its schema, as printed
        tg.start_soon(_say_lines, http, args.room, member, tg.cancel_scope, asked)
        outcome[0] = await _watch(args, member, color, asked)
        tg.cancel_scope.cancel()
    return outcome[0]


async def _watch(
    args: argparse.Namespace, member: str, color: bool, asked: dict[str, Mapping[str, Any]]
) -> str | None:
    """Print the room until it stops for good; its stop reason (None if the link closed)."""
    room: Room | None = None
    url = f"{ws_url(args.url)}{room_path(args.room)}/events?deltas=1"
    tls = ssl_context(args)
    async with open_websocket(url, token=token_for(args), ssl_context=tls) as stream:
        while True:
            try:
                event = decode_live_event(await stream.receive())
            except TransportClosed:
                return None
            if isinstance(event, DeltaEvent):
                if event.agent_id == member and not event.text:
                    print(
                        f"-- your turn (turn {event.turn}): the room waits for you --", flush=True
                    )
                continue
            if isinstance(event, WelcomeEvent):
                room = event.room
            print(format_event(event, room=room, color=color), flush=True)
            if isinstance(event, QuestionEvent):
                asked[event.question] = event.schema
                print(question_hint(event), flush=True)
            if isinstance(event, StoppedEvent) and event.reason is not StopReason.PAUSED:
                return str(event.reason)


def _read_line() -> str:
    """One line of stdin, in a worker thread named as the one to leave behind at exit."""
    thread = threading.current_thread()
    name, thread.name = thread.name, READER
    try:
        return sys.stdin.readline()
    finally:
        thread.name = name


async def _say_lines(
    http: httpx.AsyncClient,
    room_id: str,
    member: str,
    done: anyio.CancelScope,
    asked: Mapping[str, Mapping[str, Any]],
) -> None:
    while True:
        # A thread blocked on a terminal cannot be interrupted: it is abandoned on exit.
        line = await anyio.to_thread.run_sync(_read_line, abandon_on_cancel=True)
        if not line:
            done.cancel()  # end of input: leave
            return
        text = line.strip()
        if not text:
            continue
        if text.split(maxsplit=1)[0] in _ANSWERS:
            await _answer_line(http, room_id, member, text, asked)
            continue
        try:
            said = {"member": member, "text": text}
            answer = await http.post(f"{room_path(room_id)}/say", json=said)
        except httpx.HTTPError as exc:
            print(f"mesh: could not send: {exc}", file=sys.stderr)
            continue
        if answer.status_code >= 400:
            problem = answer.json().get("error", {}).get("message", answer.text)
            print(f"mesh: not sent: {problem}", file=sys.stderr)
        elif answer.status_code == 202:
            print("(queued: said after the turn in flight)", file=sys.stderr, flush=True)


#: The join prompt's answer commands, and the action each sends.
_ANSWERS: Final = {"/answer": "accept", "/decline": "decline", "/cancel": "cancel"}


async def _answer_line(
    http: httpx.AsyncClient,
    room_id: str,
    member: str,
    line: str,
    asked: Mapping[str, Mapping[str, Any]],
) -> None:
    """``/answer QUESTION FIELD=VALUE ...`` (or ``/decline``/``/cancel QUESTION``), sent."""
    command, *words = line.split()
    if not words:
        print(f"mesh: {command} needs the question's id", file=sys.stderr)
        return
    question, fields = words[0], words[1:]
    try:
        body = answer_body(member, question, _ANSWERS[command], fields, asked.get(question, {}))
        answer = await http.post(f"{room_path(room_id)}/answer", json=body)
    except AnswerWordsError as exc:
        print(f"mesh: not sent: {exc}", file=sys.stderr)
        return
    except httpx.HTTPError as exc:
        print(f"mesh: could not send: {exc}", file=sys.stderr)
        return
    if answer.status_code >= 400:
        problem = answer.json().get("error", {}).get("message", answer.text)
        print(f"mesh: not sent: {problem}", file=sys.stderr)
    else:
        print(f"(answered question {printable(question)})", file=sys.stderr, flush=True)
