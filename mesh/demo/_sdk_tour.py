"""The demo's first part: the SDK with the live echo agent as a child process over stdio.

Its tools, each called, a deadline expiring and a call being cancelled (and the
agent noticing both), then the agent dying mid-call.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import anyio

from mesh import CallTimeout, ConnectionLost, MeshError, Peer, ToolError
from mesh.testing import NotificationRecorder, open_echo_agent
from transports import StdioProcessStream


def say(text: str = "") -> None:
    print(text, flush=True)


def show(label: str, value: Any) -> None:
    say(f"  {label:<37} {value}")


async def tour(backend: str) -> None:
    say(f"\n== the echo agent over stdio, on {backend} ==")
    recorder = NotificationRecorder()
    async with open_echo_agent(handler=recorder) as echo:
        stream = echo.stream
        assert isinstance(stream, StdioProcessStream)
        show("spawned", f"pid {stream.pid}; handshake said {echo.remote_info['name']!r}")
        show("ping round trip", f"{await echo.ping() * 1000:.2f} ms")

        tools = await echo.list_tools()
        show("tools/list", ", ".join(tool["name"] for tool in tools))
        await call_each(echo)
        await deadline_and_cancel(echo, recorder)
        await many_at_once(echo)
        await sudden_death(echo, stream)


async def call_each(echo: Peer) -> None:
    show("echo(message='hello mesh')", await echo.call_tool("echo", {"message": "hello mesh"}))
    show("reverse(text='stressed')", await echo.call_tool("reverse", {"text": "stressed"}))
    progress: list[str] = []
    result = await echo.call_tool(
        "sleep",
        {"seconds": 0.3, "progress_every": 0.1},
        on_progress=lambda p: progress.append(f"{p['progress']:g}/{p['total']:g}"),
    )
    show("sleep(0.3, progress every 0.1)", f"{result}; progress {', '.join(progress)}")
    try:
        await echo.call_tool("fail", {"message": "as requested"})
    except ToolError as exc:
        show("fail(message='as requested')", f"ToolError {exc.code}: {exc}")
    show("blob(size=32)", await echo.call_tool("blob", {"size": 32}))
    try:
        await echo.call_tool("echo", {"message": 42})
    except MeshError as exc:
        show("echo(message=42)", f"{type(exc).__name__}: {exc.message}")


async def deadline_and_cancel(echo: Peer, recorder: NotificationRecorder) -> None:
    try:
        await echo.call_tool("sleep", {"seconds": 30}, timeout=0.25)
        raise SystemExit("the deadline did not fire")
    except CallTimeout as exc:
        show("sleep(30) with a 0.25 s deadline", f"CallTimeout: {exc}")
    with anyio.fail_after(5):
        seen = await recorder.wait_for("echo/cancelled")
    show("  ...the agent saw", f"echo/cancelled for {seen['id'][:8]}…")

    with anyio.move_on_after(0.25):
        await echo.call_tool("sleep", {"seconds": 30})
    with anyio.fail_after(5):
        cancelled = await recorder.wait_for("echo/cancelled", lambda p: p is not seen)
    show(
        "sleep(30), caller cancels at 0.25 s",
        f"the agent saw echo/cancelled for {cancelled['id'][:8]}…",
    )


async def many_at_once(echo: Peer) -> None:
    results: list[str] = []

    async def one(n: int) -> None:
        reply = await echo.call_tool("echo", {"message": str(n), "delay": (n % 7) / 100})
        results.append(reply["message"])

    started = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for n in range(500):
            tg.start_soon(one, n)
    took = anyio.current_time() - started
    in_order = results == [str(n) for n in range(500)]
    show("500 calls at once", f"all answered in {took:.2f} s, out of order: {not in_order}")


async def sudden_death(echo: Peer, stream: StdioProcessStream) -> None:
    failures: list[str] = []

    async def doomed() -> None:
        try:
            await echo.call_tool("sleep", {"seconds": 60})
        except ConnectionLost as exc:
            failures.append(str(exc))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(doomed)
        await anyio.wait_all_tasks_blocked()
        killed = anyio.current_time()
        os.kill(stream.pid, signal.SIGKILL)
    took = (anyio.current_time() - killed) * 1000
    show("SIGKILL with 3 calls pending", f"all 3 failed after {took:.0f} ms:")
    say(f"    {failures[0]}")
