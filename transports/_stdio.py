"""The stdio transport: one JSON message per line over a child's stdin and stdout.

``open_stdio_process`` spawns the agent and owns it: stderr goes to structured
logs (and its last lines into every "exited" error), and closing is graceful but
bounded — close stdin, wait, terminate, wait, kill. ``open_stdio_server`` is the
agent's side: a stream over its own stdin/stdout, with anything the agent's code
prints to stdout redirected to stderr so it cannot corrupt the protocol.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Final

import anyio
import anyio.abc

from transports._base import DEFAULT_MAX_FRAME_SIZE, TransportClosed, TransportInfo
from transports._groups import unwrap_single_error
from transports._lines import LineChannel
from transports._logging import get_logger

__all__ = ["StdioProcessStream", "StdioServerStream", "open_stdio_process", "open_stdio_server"]

log = get_logger("transports.stdio")

#: What a child inherits from us when its manifest does not ask for more: enough
#: to find programs and decode text, nothing secret.
BASE_ENV_VARS: Final = (
    *("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SYSTEMROOT"),
    # coverage.py's, set only while coverage measures (`make test`): the child measures
    # itself too. They hold its settings, never a secret.
    *("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"),
)
#: How many stderr lines we keep to explain a child's death.
STDERR_TAIL_LINES: Final = 20
#: After stdout ends, how long to wait for the exit status before reporting
#: without it; a SIGKILLed child is reaped in microseconds.
EXIT_STATUS_WAIT: Final = 0.5
#: Graceful close: after closing stdin, a well-behaved agent exits at once.
CLOSE_GRACE: Final = 2.0
#: After SIGTERM, give the agent this long to clean up before SIGKILL.
TERMINATE_GRACE: Final = 2.0


def describe_exit(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (exit status {code})"
    return f"exited with status {code}"


class _LineStream:
    """What both stdio ends share: a LineChannel behind the FrameStream methods."""

    _channel: LineChannel
    _info: TransportInfo

    @property
    def info(self) -> TransportInfo:
        return self._info

    @property
    def max_frame_size(self) -> int:
        return self._channel.max_frame_size

    async def send(self, frame: bytes) -> None:
        await self._channel.send(frame)

    async def send_many(self, frames: Sequence[bytes]) -> None:
        await self._channel.send_many(frames)

    def send_nowait(self, frames: Sequence[bytes]) -> bool:
        """Write now without blocking; True if all went out (else ``send_many([])`` finishes)."""
        return self._channel.send_nowait(frames)

    async def receive(self) -> bytes:
        return await self._channel.receive()

    def deliver_to(self, take: Callable[[bytes], bool] | None) -> None:
        """See `LineChannel.deliver_to` (asyncio only; trio keeps its reader)."""
        self._channel.deliver_to(take)


class StdioProcessStream(_LineStream):
    """Frames to and from a child process. Opened by :func:`open_stdio_process`."""

    def __init__(
        self,
        process: anyio.abc.Process,
        read_fd: int,
        write_fd: int,
        *,
        command: str,
        max_frame_size: int,
        agent: str | None = None,
    ) -> None:
        self._process = process
        self._agent = agent
        self._channel = LineChannel(
            read_fd, write_fd, max_frame_size=max_frame_size, describe_eof=self._describe_eof
        )
        self._info = TransportInfo("stdio", f"{command} (pid {process.pid})")
        self._stderr_tail: deque[tuple[int, str]] = deque(maxlen=STDERR_TAIL_LINES)
        #: stderr lines so far, and how many there were when the child's last frame arrived:
        #: what it wrote before answering (a tool's handled traceback) does not explain a death.
        self._stderr_lines = 0
        self._stderr_answered = 0
        self._stderr_done = anyio.Event()
        self._closing = False

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    @property
    def stderr_tail(self) -> tuple[str, ...]:
        """The last stderr lines written since the child's last frame (none: nothing since)."""
        return tuple(line for n, line in self._stderr_tail if n >= self._stderr_answered)

    async def receive(self) -> bytes:
        frame = await self._channel.receive()
        self._stderr_answered = self._stderr_lines
        return frame

    def deliver_to(self, take: Callable[[bytes], bool] | None) -> None:
        if take is None:
            self._channel.deliver_to(None)
            return

        def taken(frame: bytes) -> bool:
            if not take(frame):
                return False
            self._stderr_answered = self._stderr_lines  # as receive does
            return True

        self._channel.deliver_to(taken)

    async def _describe_eof(self) -> TransportClosed:
        with anyio.move_on_after(EXIT_STATUS_WAIT):
            await self._process.wait()
        with anyio.move_on_after(EXIT_STATUS_WAIT):
            await self._stderr_done.wait()
        code = self._process.returncode
        how = (
            "closed"
            if self._closing
            else f"agent process {self._process.pid} {describe_exit(code)}"
        )
        return TransportClosed(how, exit_code=code, stderr_tail=self.stderr_tail)

    async def _pump_stderr(self, stderr: anyio.abc.ByteReceiveStream) -> None:
        pid = self._process.pid
        pending = b""
        try:
            async for chunk in stderr:
                *lines, pending = (pending + chunk).split(b"\n")
                for raw in lines:
                    self._log_stderr(pid, raw)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            if pending:
                self._log_stderr(pid, pending)
            self._stderr_done.set()

    def _log_stderr(self, pid: int, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip()
        if line:
            self._stderr_tail.append((self._stderr_lines, line))
            self._stderr_lines += 1
            record = _json_record(line)
            if record is not None:  # an agent's own structured log: a record, not a string
                log.info("agent.stderr", agent=self._agent, pid=pid, record=record)
            else:
                log.info("agent.stderr", agent=self._agent, pid=pid, line=line)

    async def aclose(self) -> None:
        """Close stdin, then wait, terminate, wait, kill — each step bounded."""
        if self._closing:
            return
        self._closing = True
        self._channel.mark_closed(TransportClosed("closed"))
        with anyio.CancelScope(shield=True):
            self._channel.close_write()
            process = self._process
            with anyio.move_on_after(CLOSE_GRACE):
                await process.wait()
            if process.returncode is None:
                log.warning("agent.terminate", pid=process.pid, after=CLOSE_GRACE)
                _signal(process, signal.SIGTERM)
                with anyio.move_on_after(TERMINATE_GRACE):
                    await process.wait()
            if process.returncode is None:
                log.warning("agent.kill", pid=process.pid, after=TERMINATE_GRACE)
                _signal(process, signal.SIGKILL)
                await process.wait()
            self._channel.close_read()
            with anyio.move_on_after(EXIT_STATUS_WAIT):
                await self._stderr_done.wait()
            await process.aclose()


def _json_record(line: str) -> dict[str, object] | None:
    if not line.startswith("{"):
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _signal(process: anyio.abc.Process, signum: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        process.send_signal(signum)


def child_environment(env: Mapping[str, str] | None, *, inherit: bool) -> dict[str, str]:
    """The environment a child gets: only the basics plus what its manifest names."""
    if inherit:
        base = dict(os.environ)
    else:
        base = {k: os.environ[k] for k in BASE_ENV_VARS if k in os.environ}
    base.update(env or {})
    return base


@asynccontextmanager
async def open_stdio_process(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    inherit_env: bool = False,
    cwd: str | os.PathLike[str] | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    agent: str | None = None,
) -> AsyncIterator[StdioProcessStream]:
    """Spawn ``command`` and yield a frame stream over its stdin/stdout.

    ``agent`` (its id) names the child in the logs of what it writes to stderr.

    The child gets only :data:`BASE_ENV_VARS` plus ``env`` unless ``inherit_env``.
    On exit the child is closed gracefully (see :meth:`StdioProcessStream.aclose`).
    """
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    try:
        process = await anyio.open_process(
            [command, *args],
            stdin=to_child_r,
            stdout=from_child_w,
            stderr=subprocess.PIPE,
            env=child_environment(env, inherit=inherit_env),
            cwd=cwd,
        )
    except BaseException:
        for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
            os.close(fd)
        raise
    os.close(to_child_r)
    os.close(from_child_w)
    stream = StdioProcessStream(
        process,
        from_child_r,
        to_child_w,
        command=os.path.basename(command),
        max_frame_size=max_frame_size,
        agent=agent,
    )
    log.debug("agent.spawned", pid=process.pid, command=command)
    assert process.stderr is not None
    with unwrap_single_error():
        async with anyio.create_task_group() as tg:
            tg.start_soon(stream._pump_stderr, process.stderr)
            try:
                yield stream
            finally:
                await stream.aclose()


class StdioServerStream(_LineStream):
    """The agent's end: frames over its own stdin and stdout."""

    def __init__(self, channel: LineChannel) -> None:
        self._channel = channel
        self._info = TransportInfo("stdio", "parent (stdin/stdout)")

    async def aclose(self) -> None:
        self._channel.mark_closed(TransportClosed("closed"))
        self._channel.close_write()
        self._channel.close_read()


async def _parent_closed() -> TransportClosed:
    return TransportClosed("the parent closed our stdin")


@asynccontextmanager
async def open_stdio_server(
    *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
) -> AsyncIterator[StdioServerStream]:
    """A frame stream over this process's stdin/stdout.

    While it is open, file descriptor 1 points at stderr, so a stray ``print()``
    in a tool lands in the logs instead of in the middle of a frame.
    """
    sys.stdout.flush()
    read_fd = os.dup(0)
    write_fd = os.dup(1)
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    channel = LineChannel(
        read_fd, write_fd, max_frame_size=max_frame_size, describe_eof=_parent_closed
    )
    stream = StdioServerStream(channel)
    try:
        yield stream
    finally:
        with anyio.CancelScope(shield=True):
            await stream.aclose()
            sys.stdout.flush()
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)
