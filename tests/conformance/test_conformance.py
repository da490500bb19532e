"""The transport conformance suite: the same behaviour over every transport."""

from __future__ import annotations

import random

import anyio
import pytest

from mesh import (
    CallTimeout,
    ConnectionLost,
    ErrorCode,
    InvalidParams,
    MessageTooLarge,
    MethodNotFound,
    SessionConfig,
    ToolError,
)
from mesh.testing import NotificationRecorder
from tests.conformance.conftest import NO_PUSH, EchoFactory

pytestmark = pytest.mark.anyio


async def test_round_trip(open_echo: EchoFactory) -> None:
    async with open_echo() as echo:
        assert await echo.call_tool("echo", {"message": "héllo ✓"}) == {"message": "héllo ✓"}
        assert await echo.call_tool("reverse", {"text": "abc"}) == {"text": "cba"}
        assert (await echo.call("ping"))["agent"] == "echo"
        assert await echo.ping() > 0


async def test_tools_list_publishes_schemas(open_echo: EchoFactory) -> None:
    async with open_echo() as echo:
        tools = {tool["name"]: tool for tool in await echo.list_tools()}
    assert {"echo", "reverse", "sleep", "fail", "blob"} <= set(tools)
    schema = tools["echo"]["inputSchema"]
    assert schema["required"] == ["message"]
    assert schema["properties"]["message"] == {"type": "string"}
    assert schema["additionalProperties"] is False
    assert "Return the message unchanged" in tools["echo"]["description"]


async def test_many_calls_in_flight_complete_out_of_order(open_echo: EchoFactory) -> None:
    rng = random.Random(7)
    finished: list[int] = []
    async with open_echo() as echo:

        async def one(n: int, delay: float) -> None:
            result = await echo.call_tool("echo", {"message": f"m{n}", "delay": delay})
            assert result == {"message": f"m{n}"}
            finished.append(n)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for n in range(200):
                    tg.start_soon(one, n, rng.uniform(0, 0.05))
    assert sorted(finished) == list(range(200))
    assert finished != list(range(200))


async def test_wait_calls_finished_outlasts_every_call_in_flight(open_echo: EchoFactory) -> None:
    """Two watchers, calls ending one by one: a watcher returns once every call has its
    outcome (a rolling restart waits like this for the old link's calls before it closes)."""
    ended: list[str] = []
    async with open_echo() as echo:

        async def one(n: int) -> None:
            await echo.call_tool("echo", {"message": f"m{n}", "delay": 0.01 * n})
            ended.append(f"call {n}")

        async def watch(name: str) -> None:
            await echo.wait_calls_finished()
            assert echo.statistics().calls_in_flight == 0
            assert echo.statistics().calls_succeeded >= 5
            ended.append(name)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for n in range(1, 6):
                    tg.start_soon(one, n)
                await anyio.wait_all_tasks_blocked()
                tg.start_soon(watch, "a")
                tg.start_soon(watch, "b")
    assert sorted(ended) == ["a", "b", *(f"call {n}" for n in range(1, 6))]


async def test_remote_errors_are_typed_and_named(open_echo: EchoFactory) -> None:
    async with open_echo() as echo:
        with pytest.raises(ToolError, match="boom") as failed:
            await echo.call_tool("fail", {"message": "boom"})
        assert failed.value.code == ErrorCode.TOOL_ERROR and failed.value.data == {
            "type": "RuntimeError"
        }
        with pytest.raises(MethodNotFound, match="no tool named 'ecko'"):
            await echo.call_tool("ecko", {})
        with pytest.raises(MethodNotFound, match="no method 'nope/nothing'"):
            await echo.call("nope/nothing")
        with pytest.raises(InvalidParams, match=r"got `int` - at `\$\.message`"):
            await echo.call_tool("echo", {"message": 5})
        with pytest.raises(InvalidParams, match="unknown field `extra`"):
            await echo.call_tool("echo", {"message": "x", "extra": 1})
        # ... and the connection keeps serving.
        assert await echo.call_tool("echo", {"message": "still here"}) == {"message": "still here"}


async def test_deadline_expiry_reaches_the_agent(open_echo: EchoFactory, transport: str) -> None:
    recorder = NotificationRecorder()
    async with open_echo(handler=recorder) as echo:
        with pytest.raises(CallTimeout, match=r"no response within 0\.2 s") as timed_out:
            await echo.call_tool("sleep", {"seconds": 30}, timeout=0.2)
        assert timed_out.value.agent == "echo" and timed_out.value.method == "tools/call sleep"
        assert echo.statistics().calls_timed_out == 1
        if transport not in NO_PUSH:  # over HTTP the agent has no way to tell us
            with anyio.fail_after(5):
                await recorder.wait_for("echo/cancelled")
        assert await echo.call_tool("echo", {"message": "after"}) == {"message": "after"}


async def test_caller_cancel_reaches_the_agent(open_echo: EchoFactory, transport: str) -> None:
    recorder = NotificationRecorder()
    async with open_echo(handler=recorder) as echo:
        with anyio.move_on_after(0.2) as scope:
            await echo.call_tool("sleep", {"seconds": 30})
        assert scope.cancelled_caught
        assert echo.statistics().calls_in_flight == 0
        if transport not in NO_PUSH:
            with anyio.fail_after(5):
                await recorder.wait_for("echo/cancelled")
        assert await echo.call_tool("echo", {"message": "after"}) == {"message": "after"}


async def test_progress_keeps_a_slow_call_alive(open_echo: EchoFactory, transport: str) -> None:
    seen: list[float] = []
    async with open_echo() as echo:
        # The call outlives its 1 s deadline 2.4 times over, kept alive by progress every
        # 0.1 s: on a loaded machine a gap between two of them can pass 0.4 s, not 1 s.
        if transport in NO_PUSH:
            # Documented: progress cannot travel back over HTTP, so it cannot extend a deadline.
            with pytest.raises(CallTimeout):
                await echo.call_tool("sleep", {"seconds": 2.4, "progress_every": 0.1}, timeout=1)
            return
        result = await echo.call_tool(
            "sleep",
            {"seconds": 2.4, "progress_every": 0.1},
            timeout=1,
            on_progress=lambda p: seen.append(p["progress"]),
        )
    assert result == {"slept": 2.4}
    assert len(seen) >= 5 and seen == sorted(seen)


async def test_size_limits_hold_both_ways(open_echo: EchoFactory) -> None:
    async with open_echo(config=SessionConfig(max_frame_size=64 * 1024)) as echo:
        with pytest.raises(MessageTooLarge, match="exceeds the 65536-byte limit"):
            await echo.call_tool("echo", {"message": "x" * 70_000})
        # The agent's limit is 1 MiB: a 2 MiB result is refused on its side.
        with pytest.raises(MessageTooLarge):
            await echo.call_tool("blob", {"size": 2 * 1024 * 1024})
        # A result between our limit and the agent's arrives too large for us.
        with pytest.raises(MessageTooLarge, match="limit"):
            await echo.call_tool("blob", {"size": 100_000}, timeout=10)
        assert await echo.call_tool("echo", {"message": "ok"}) == {"message": "ok"}


async def test_calls_after_close_fail_at_once(open_echo: EchoFactory) -> None:
    async with open_echo() as echo:
        await echo.aclose()
        with pytest.raises(ConnectionLost, match="closed"):
            await echo.call_tool("echo", {"message": "x"})
