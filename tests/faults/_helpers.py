"""What the fault tests share: a process's memory, bad frames, pipelined floods, kernel events,
and agents that tell which calls reached them.

Launching agents is ``mesh.testing``'s job; this adds only what faults need on top.
Nothing here waits with ``sleep``: peer closes are the kernel's ``POLLRDHUP``, calls in
an agent's hands are its own word on stdout, and every wait is bounded by its caller.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass
from typing import Final

import anyio
import msgspec

from mesh import Agent, RequestContext
from mesh.testing import EchoServer, spawn_echo_server
from transports import FrameStream

#: The agent's message limit in the flood tests: small, so oversized frames are cheap to send.
SMALL_LIMIT: Final = 4096
MiB: Final = 1 << 20


def vm_rss(pid: int) -> int:
    """Resident memory of process ``pid`` in bytes (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def stop_and_kill(pid: int) -> None:
    """Let a stopped process run again and kill it; fine if it is gone already."""
    for signum in (signal.SIGCONT, signal.SIGKILL):
        with suppress(ProcessLookupError):
            os.kill(pid, signum)


# -- bad frames -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BadFrame:
    """One malformed frame and what its error answer must say."""

    frame: bytes
    answer_id: str | None  # the id the error response must carry (None: unreadable)
    codes: frozenset[int]


_PARSE = frozenset({-32700})
_INVALID = frozenset({-32600})
_PARSE_OR_INVALID = _PARSE | _INVALID
_TOO_LARGE = frozenset({-32006})


def bad_frames(n: int, *, limit: int = SMALL_LIMIT) -> list[BadFrame]:
    """Malformed, wrongly typed and oversized frames, each with a unique id where it has one.

    None is a response (an invalid response is never answered) and none holds a
    newline (stdio's framing).
    """
    out: list[BadFrame] = []
    for i in range(n):
        rid = f"f{i}"
        kind = i % 15
        if kind == 0:
            out.append(BadFrame(b"not json at all %d" % i, None, _PARSE))
        elif kind == 1:
            frame = b'{"type":"nonsense","id":"%s","timestamp":1,"payload":{}}' % rid.encode()
            out.append(BadFrame(frame, rid, _INVALID))
        elif kind == 2:
            frame = b'{"type":"request","id":"%s","timestamp":1}' % rid.encode()
            out.append(BadFrame(frame, rid, _INVALID))
        elif kind == 3:
            frame = b'{"type":"request","id":"%s","timestamp":"now","payload":{"method":"ping"}}'
            out.append(BadFrame(frame % rid.encode(), rid, _INVALID))
        elif kind == 4:
            frame = b'{"type":"request","id":"%s","timestamp":1,"payload":{"method":42}}'
            out.append(BadFrame(frame % rid.encode(), rid, _INVALID))
        elif kind == 5:  # oversized: discarded unread, the id salvaged from its head
            head = b'{"type":"request","id":"%s","timestamp":1,"payload":{"method":"ping"},"x":"'
            frame = head % rid.encode()
            frame += b"9" * (limit + 100 - len(frame)) + b'"}'
            out.append(BadFrame(frame, rid, _TOO_LARGE))
        elif kind == 6:
            out.append(BadFrame(b"[%d]" % i, None, _INVALID))
        elif kind == 7:
            out.append(BadFrame(b'"just a string %d"' % i, None, _INVALID))
        elif kind == 8:
            out.append(BadFrame(b"\xff\xfe\x00not utf-8 %d" % i, None, _PARSE))
        elif kind == 9:
            frame = b'{"type":"request","id":{"n":%d},"timestamp":1,"payload":{"method":"ping"}}'
            out.append(BadFrame(frame % i, None, _INVALID))
        elif kind == 10:
            frame = b'{"type":"request","id":"","timestamp":%d,"payload":{"method":"ping"}}'
            out.append(BadFrame(frame % i, None, _INVALID))
        elif kind == 11:  # truncated mid-object: not JSON, but the id is still readable
            frame = b'{"type":"request","id":"%s","timestamp":1,"payload":{"meth' % rid.encode()
            out.append(BadFrame(frame, rid, _PARSE))
        elif kind == 12:
            frame = b'{"type":"notification","id":"%s","timestamp":1,"payload":{"method":""}}'
            out.append(BadFrame(frame % rid.encode(), rid, _INVALID))
        elif kind == 13:  # an id over 128 characters is not an id we can echo
            frame = b'{"type":"request","id":"%s","timestamp":1,"payload":{"method":"ping"}}'
            long_id = (rid.encode() * 60)[:200]
            out.append(BadFrame(frame % long_id, None, _INVALID))
        else:  # wrongly typed all the way down
            frame = b'{"type":true,"id":"%s","timestamp":[],"payload":"x"}' % rid.encode()
            out.append(BadFrame(frame, rid, _PARSE_OR_INVALID))
    return out


#: A 2 KB request nested 1,000 deep: far under any size limit, deeper than Python recurses
#: (msgspec raised RecursionError for it, which crashed the session's read loop).
DEEP = (
    b'{"type":"request","id":"deep","timestamp":1,"payload":{"method":"ping","params":'
    + b"[" * 1000
    + b"]" * 1000
    + b"}}"
)


def check_error_answers(sent: Sequence[BadFrame], answers: Sequence[bytes]) -> None:
    """Every bad frame got exactly one error response, with its id and a fitting code."""
    assert len(answers) == len(sent)
    expected_ids = sorted(b.answer_id for b in sent if b.answer_id is not None)
    by_id: dict[str | None, list[int]] = {}
    for raw in answers:
        reply = msgspec.json.decode(raw)
        assert reply["type"] == "response", reply
        payload = reply["payload"]
        assert payload["success"] is False and payload["error"]["message"], reply
        by_id.setdefault(reply["id"], []).append(payload["error"]["code"])
    null_codes = by_id.pop(None, [])
    answered_ids = sorted(rid for rid in by_id if rid is not None)
    assert answered_ids == expected_ids, "every readable id is answered exactly once"
    assert all(len(codes) == 1 for codes in by_id.values())
    assert len(null_codes) == sum(1 for b in sent if b.answer_id is None)
    for bad in sent:
        if bad.answer_id is not None:
            assert by_id[bad.answer_id][0] in bad.codes, (bad, by_id[bad.answer_id])


async def flood(stream: FrameStream, frames: Sequence[bytes], *, batch: int = 250) -> list[bytes]:
    """Send ``frames`` in batches while reading as many answers; return the answers."""

    async def send_all() -> None:
        for start in range(0, len(frames), batch):
            await stream.send_many(frames[start : start + batch])

    answers: list[bytes] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(send_all)
        answers.extend([await receive_answer(stream) for _ in frames])
    return answers


#: How the agent's own heartbeat frame starts (msgspec writes ``type`` first).
_HEARTBEAT = b'{"type":"heartbeat"'


async def receive_answer(stream: FrameStream) -> bytes:
    """The next frame that answers something: the agent also sends heartbeats on its own
    schedule, and a flood slowed by a loaded machine outlasts their interval."""
    while (frame := await stream.receive()).startswith(_HEARTBEAT):
        pass
    return frame


def ping_frame(request_id: str) -> bytes:
    return (
        b'{"type":"request","id":"%s","timestamp":1,"payload":{"method":"ping"}}'
        % request_id.encode()
    )


# -- HTTP without a client library: pipelined POSTs --------------------------------------------


@dataclass(frozen=True, slots=True)
class RawReply:
    status: int
    content_type: str
    body: bytes


def _post(body: bytes) -> bytes:
    head = b"POST /rpc HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


async def post_pipelined(port: int, bodies: Sequence[bytes]) -> list[RawReply]:
    """POST ``bodies`` to ``/rpc`` on one connection, all written before any reply is read.

    httpx waits for each reply before sending the next request on a connection; this
    does not, so the server, not the client, sets the pace. Replies come back in order.
    """
    replies: list[RawReply] = []
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(b"".join(_post(body) for body in bodies))
        buffer = bytearray()
        start = 0
        while len(replies) < len(bodies):
            end = buffer.find(b"\r\n\r\n", start)
            if end >= 0:
                lines = bytes(buffer[start:end]).split(b"\r\n")
                headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
                length = int(headers[b"content-length"])
                if len(buffer) >= end + 4 + length:
                    body = bytes(buffer[end + 4 : end + 4 + length])
                    ctype = headers.get(b"content-type", b"").decode()
                    replies.append(RawReply(int(lines[0].split()[1]), ctype, body))
                    start = end + 4 + length
                    continue
            buffer += await stream.receive()  # EndOfStream here: a reply went missing
    return replies


# -- sockets the server should close ---------------------------------------------------------


async def wait_closed_by_peer(
    sockets: Sequence[socket.socket], *, poll_ms: int = 50
) -> dict[int, float]:
    """Wait until the peer has closed every socket; when each was seen closed (monotonic).

    ``POLLRDHUP`` reports the peer's FIN even while unread data sits in our buffer, so
    a client that never reads still learns of the close. The caller bounds the wait.
    """
    poller = select.poll()
    watching = {s.fileno() for s in sockets}
    for fd in watching:
        poller.register(fd, select.POLLRDHUP)
    closed: dict[int, float] = {}
    gone = select.POLLRDHUP | select.POLLHUP | select.POLLERR
    while watching:  # ends when all are closed; the caller's fail_after bounds it
        events = await anyio.to_thread.run_sync(poller.poll, poll_ms)
        now = time.monotonic()
        for fd, mask in events:
            if mask & gone and fd in watching:
                closed[fd] = now
                watching.discard(fd)
                poller.unregister(fd)
    return closed


def recording_agent(calls: list[str]) -> Agent:
    """An agent ``guarded`` whose one tool, ``touch``, records each request id it serves:
    proof of which messages of a connection reached a handler."""
    agent = Agent("guarded")

    @agent.tool
    async def touch(ctx: RequestContext) -> str:
        calls.append(ctx.request_id)
        return "touched"

    return agent


# -- HTTP: know when the agent holds a call ----------------------------------------------------

#: The echo agent plus ``hold``, which says on stdout when each call starts.
HOLDING_AGENT: Final = "tests.faults._holding_agent"


def spawn_holding_server() -> AbstractAsyncContextManager[EchoServer]:
    """``tests.faults._holding_agent`` serving HTTP and WebSocket, and its process.

    Run from the repository root (as pytest is), where ``tests`` is importable.
    """
    return spawn_echo_server(module=HOLDING_AGENT)


async def wait_holding(server: EchoServer, count: int) -> None:
    """Return once ``count`` calls of ``hold`` have started (the agent says so on stdout)."""
    assert server.process.stdout is not None
    lines = b""
    while lines.count(b"holding\n") < count:  # the caller bounds the wait
        lines += await server.process.stdout.receive()
