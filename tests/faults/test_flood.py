"""Row 4: 10,000 malformed, oversized and wrongly typed frames on each transport.

Each frame gets its error answer (stdio and WebSocket: an error response frame naming
the problem; HTTP: 400 or 413 with a JSON body), the agent process stays alive (a
``ping`` afterwards is answered) and its resident memory stays flat. Frames are
pipelined (sent in batches while the answers are read; over HTTP, many requests
written on a connection before the replies are read), so 10,000 take seconds.
"""

from __future__ import annotations

import anyio
import msgspec
import pytest
from sniffio import current_async_library

from mesh import SessionConfig, open_agent_server
from mesh.agents.echo import agent as echo_agent
from mesh.testing import echo_agent_command, spawn_echo_server
from tests.faults._helpers import (
    DEEP,
    SMALL_LIMIT,
    BadFrame,
    MiB,
    bad_frames,
    check_error_answers,
    flood,
    ping_frame,
    post_pipelined,
    receive_answer,
    vm_rss,
)
from transports import FrameStream, open_stdio_process, open_websocket

pytestmark = pytest.mark.anyio

FRAMES = 10_000
#: Enough rounds first that the allocator's pools and caches exist before we measure.
WARM_UP = 1_500
#: Generous (the agent's RSS wanders by ~3 MiB): the point is "flat", not "frugal". Keeping
#: one error answer and its bookkeeping (~1 KiB) per bad frame would add ~10 MiB.
MAX_GROWTH = 10 * MiB
#: 10,000 frames take about a second over stdio and WebSocket; this is a loaded machine's
#: worst case. Over HTTP they take 5-10 s (the server answers 1,000-2,000 requests/s),
#: 25 s when the two cores are shared five ways, and over 50 s at load 20 (the guard only
#: turns a hang into a failure; the test's own pytest timeout is raised to match).
FLOOD_TIMEOUT = 15.0
HTTP_FLOOD_TIMEOUT = 240.0


async def _flood_and_check(stream: FrameStream, pid: int, frames: list[BadFrame]) -> int:
    """Warm up, measure, flood, measure; check every answer and that the agent lives."""
    raw = [bad.frame for bad in frames]
    check_error_answers(frames[:WARM_UP], await flood(stream, raw[:WARM_UP]))
    before = vm_rss(pid)
    check_error_answers(frames, await flood(stream, raw))
    growth = vm_rss(pid) - before
    await stream.send(ping_frame("alive?"))
    answer = msgspec.json.decode(await receive_answer(stream))
    assert answer["id"] == "alive?" and answer["payload"]["success"] is True
    return growth


async def test_stdio_answers_every_bad_frame_and_stays_flat() -> None:
    command, args = echo_agent_command(
        "--max-frame-size", str(SMALL_LIMIT), backend=current_async_library()
    )
    async with open_stdio_process(command, args) as stream:
        with anyio.fail_after(FLOOD_TIMEOUT):
            growth = await _flood_and_check(stream, stream.pid, bad_frames(FRAMES))
        assert stream.returncode is None
    assert growth < MAX_GROWTH, f"agent grew {growth / MiB:.1f} MiB over {FRAMES} bad frames"


async def test_websocket_answers_every_bad_frame_and_stays_flat() -> None:
    extra = ["--max-frame-size", str(SMALL_LIMIT)]
    async with spawn_echo_server(extra_args=extra) as server, open_websocket(server.ws) as stream:
        with anyio.fail_after(FLOOD_TIMEOUT):
            # Text frames must be UTF-8 (one that is not closes the link with 1007:
            # test_websocket_invalid_utf8.py), so the flood leaves those out.
            frames = [bad for bad in bad_frames(FRAMES) if _is_utf8(bad.frame)]
            growth = await _flood_and_check(stream, server.process.pid, frames)
        assert server.process.returncode is None
    assert growth < MAX_GROWTH, f"agent grew {growth / MiB:.1f} MiB over {FRAMES} bad frames"


def _is_utf8(frame: bytes) -> bool:
    try:
        frame.decode()
    except UnicodeDecodeError:
        return False
    return True


#: Fewer: each HTTP request costs the server ~0.5 ms.
HTTP_WARM_UP = 500
#: Connections posting at once: the server's one core is the limit, not the client.
HTTP_CONNECTIONS = 8


def _by_connection(frames: list[BadFrame]) -> list[list[BadFrame]]:
    """Runs of frames for one connection each, ending with an oversized body.

    A 413 closes its connection (the body is left unread), so each run ends there.
    """
    runs: list[list[BadFrame]] = [[]]
    for bad in frames:
        runs[-1].append(bad)
        if len(bad.frame) > SMALL_LIMIT:
            runs.append([])
    return [run for run in runs if run]


async def _post_all(port: int, frames: list[BadFrame]) -> None:
    """POST every frame, pipelined; each must get a 400 or 413 with a JSON body."""
    runs = iter(_by_connection(frames))

    async def connection() -> None:
        for run in runs:  # shared iterator: the connections split the runs
            replies = await post_pipelined(port, [bad.frame for bad in run])
            for bad, reply in zip(run, replies, strict=True):
                assert reply.content_type == "application/json"
                body = msgspec.json.decode(reply.body)
                if len(bad.frame) > SMALL_LIMIT:
                    assert reply.status == 413, reply
                    assert "exceeds the 4096-byte limit" in body["error"]["message"]
                else:
                    assert reply.status == 400, reply
                    assert body["payload"]["success"] is False
                    assert body["id"] == bad.answer_id
                    assert body["payload"]["error"]["code"] in bad.codes

    async with anyio.create_task_group() as tg:
        for _ in range(HTTP_CONNECTIONS):
            tg.start_soon(connection)


@pytest.mark.slow  # the HTTP server answers 1,000-2,000 requests/s: 5-10 s here
@pytest.mark.timeout(HTTP_FLOOD_TIMEOUT + 60)
async def test_http_answers_every_bad_body_and_stays_flat() -> None:
    extra = ["--max-frame-size", str(SMALL_LIMIT)]
    async with spawn_echo_server(extra_args=extra) as server:
        port = int(server.http.rsplit(":", 1)[1])
        frames = bad_frames(FRAMES)
        with anyio.fail_after(HTTP_FLOOD_TIMEOUT):
            await _post_all(port, frames[:HTTP_WARM_UP])
            before = vm_rss(server.process.pid)
            await _post_all(port, frames)
            growth = vm_rss(server.process.pid) - before
            [alive] = await post_pipelined(port, [ping_frame("alive?")])
        assert alive.status == 200 and msgspec.json.decode(alive.body)["payload"]["success"]
        assert server.process.returncode is None
    assert growth < MAX_GROWTH, f"agent grew {growth / MiB:.1f} MiB over {FRAMES} bad bodies"


@pytest.mark.parametrize("transport", ["stdio", "http", "websocket"])
async def test_a_deeply_nested_frame_is_answered_and_the_agent_lives(transport: str) -> None:
    """2 KB nested 1,000 deep: once a RecursionError that killed the agent (500 over HTTP)."""
    with anyio.fail_after(10):
        if transport == "stdio":
            command, args = echo_agent_command(backend=current_async_library())
            async with open_stdio_process(command, args) as stream:
                answers = await flood(stream, [DEEP, ping_frame("alive?")])
        else:
            async with open_agent_server(echo_agent, config=SessionConfig()) as server:
                if transport == "websocket":
                    async with open_websocket(server.ws_url + "/ws") as stream:
                        answers = await flood(stream, [DEEP, ping_frame("alive?")])
                else:
                    replies = await post_pipelined(server.port, [DEEP, ping_frame("alive?")])
                    assert [reply.status for reply in replies] == [400, 200]
                    answers = [reply.body for reply in replies]
    deep, alive = (msgspec.json.decode(answer) for answer in answers)
    assert deep["id"] == "deep" and deep["payload"]["error"]["code"] in (-32700, -32600)
    assert alive["id"] == "alive?" and alive["payload"]["success"] is True
