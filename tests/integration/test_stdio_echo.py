"""The live echo agent as a real child process over stdio."""

from __future__ import annotations

import os
import random
import signal

import anyio
import msgspec
import pytest
from structlog.testing import capture_logs

from mesh import ConnectionLost, ErrorCode, ToolError
from mesh.protocol import MESH_CODEC, Request, RequestPayload, Response
from mesh.testing import echo_agent_command, open_echo_agent
from transports import StdioProcessStream, open_stdio_process

pytestmark = pytest.mark.anyio


async def test_a_thousand_concurrent_calls_answered_out_of_order() -> None:
    rng = random.Random(1)
    completed: list[int] = []
    async with open_echo_agent() as echo:

        async def one(n: int) -> None:
            result = await echo.call_tool(
                "echo", {"message": f"call-{n}", "delay": rng.uniform(0, 0.05)}
            )
            assert result == {"message": f"call-{n}"}
            completed.append(n)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for n in range(1000):
                    tg.start_soon(one, n)
        stats = echo.statistics()
    assert sorted(completed) == list(range(1000))
    assert completed != list(range(1000)), "answers should arrive out of order"
    assert stats.calls_succeeded >= 1000 and stats.calls_in_flight == 0


async def test_sigkill_fails_every_pending_call_at_once_with_the_exit_status() -> None:
    errors: list[BaseException] = []
    async with open_echo_agent() as echo:
        stream = echo.stream
        assert isinstance(stream, StdioProcessStream)

        async def pending() -> None:
            try:
                await echo.call_tool("sleep", {"seconds": 60})
            except ConnectionLost as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(pending)
            await anyio.wait_all_tasks_blocked()
            assert echo.statistics().calls_in_flight == 20
            os.kill(stream.pid, signal.SIGKILL)
            # A hang guard, not a measure of "at once": the calls sleep 60 s under a 30 s
            # deadline and the heartbeat TTL is 30 s, so within 10 s only the death ends them.
            with anyio.fail_after(10):
                await echo.wait_closed()
    assert len(errors) == 20
    for exc in errors:
        assert isinstance(exc, ConnectionLost)
        assert exc.exit_code == -signal.SIGKILL
        assert "killed by SIGKILL" in str(exc) and "agent 'echo'" in str(exc)


async def test_a_thousand_malformed_frames_each_get_an_error_and_the_agent_lives() -> None:
    limit = 4096
    command, args = echo_agent_command("--max-frame-size", str(limit))
    bad_frames = [
        b"not json at all",
        b'{"type":"nonsense","id":"x1","timestamp":1,"payload":{}}',
        b'{"type":"request","id":"x2","timestamp":1}',
        b'{"type":"request","id":"x3","timestamp":"yesterday","payload":{"method":"ping"}}',
        b'{"type":"request","id":"x4","timestamp":1,"payload":{"method":42}}',
        b'{"type":"request","id":"x5","timestamp":1,"payload":{"method":"ping"},"x":'
        + b"9" * limit
        + b"}",
        b"[]",
        b'"just a string"',
        b"\xff\xfe\x00garbage",
    ]
    async with open_stdio_process(command, args, max_frame_size=1 << 20) as stream:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:

                async def send_all() -> None:
                    for n in range(1000):
                        await stream.send(bad_frames[n % len(bad_frames)])

                tg.start_soon(send_all)
                codes: list[int] = []
                for _ in range(1000):
                    reply = MESH_CODEC.decode(await stream.receive())
                    assert isinstance(reply, Response) and not reply.payload.success
                    assert reply.payload.error is not None
                    codes.append(reply.payload.error.code)
            assert set(codes) == {
                ErrorCode.PARSE_ERROR,
                ErrorCode.INVALID_REQUEST,
                ErrorCode.TOO_LARGE,
            }
            ping = Request(id="alive?", timestamp=1, payload=RequestPayload(method="ping"))
            await stream.send(MESH_CODEC.encode(ping))
            answer = MESH_CODEC.decode(await stream.receive())
    assert isinstance(answer, Response) and answer.id == "alive?" and answer.payload.success


async def test_invalid_frame_errors_name_the_path() -> None:
    command, args = echo_agent_command()
    async with open_stdio_process(command, args) as stream:
        await stream.send(b'{"type":"request","id":"p1","timestamp":1,"payload":{"method":["x"]}}')
        with anyio.fail_after(10):
            reply = msgspec.json.decode(await stream.receive())
    assert reply["id"] == "p1"
    assert reply["payload"]["error"]["code"] == ErrorCode.INVALID_REQUEST
    assert "`$.payload.method`" in reply["payload"]["error"]["message"]


async def test_stderr_becomes_structured_logs_and_close_is_graceful() -> None:
    with capture_logs() as logs:
        async with open_echo_agent() as echo:
            stream = echo.stream
            assert isinstance(stream, StdioProcessStream)
            with pytest.raises(ToolError, match="visible in logs"):
                await echo.call_tool("fail", {"message": "visible in logs"})
    assert stream.returncode == 0, "closing stdin should let the agent exit cleanly"
    entries = [entry for entry in logs if entry["event"] == "agent.stderr"]
    assert entries and all(entry["agent"] == "echo" for entry in entries)
    # The agent logs JSON lines: each arrives as a record, not as an escaped string.
    failed = next(e["record"] for e in entries if e.get("record", {}).get("tool") == "fail")
    assert failed["event"] == "agent.tool_failed" and "visible in logs" in failed["exception"]


async def test_a_killed_agent_is_reported_without_the_tracebacks_it_already_handled() -> None:
    with capture_logs() as logs:
        async with open_echo_agent() as echo:
            with pytest.raises(ToolError, match="handled earlier"):
                await echo.call_tool("fail", {"message": "handled earlier"})
            with anyio.fail_after(30):  # until its stderr line is in: each answer lets it arrive
                while not any(e["event"] == "agent.stderr" for e in logs):
                    await echo.call("ping")
            await echo.call("ping")  # an answer after the handled traceback
            stream = echo.stream
            assert isinstance(stream, StdioProcessStream)
            os.kill(stream.pid, signal.SIGKILL)
            with pytest.raises(ConnectionLost) as lost, anyio.fail_after(30):
                await echo.call_tool("echo", {"message": "anyone?"})
    assert "was killed by SIGKILL" in str(lost.value)
    assert lost.value.stderr_tail == ()
    assert "handled earlier" not in str(lost.value)


async def test_an_agent_that_dies_at_start_is_reported_with_its_stderr() -> None:
    with pytest.raises(ConnectionLost) as lost:
        async with open_echo_agent(extra_args=["--no-such-flag"]):
            pass
    assert lost.value.exit_code == 2
    assert "exited with status 2" in str(lost.value)
    assert any("--no-such-flag" in line for line in lost.value.stderr_tail)
