"""Raw anyio pipe echo, one JSON object per line: the practical limit for stdio RPC.

Child (``python -m bench.baselines.pipe_echo asyncio|trio``): reads stdin in
chunks, decodes and re-encodes every complete line, and writes all the replies
of a chunk in one write; it runs on the same backend as the client, with that
backend's own pipe streams (asyncio's StreamReader over the pipe, trio's
FdStream), which is what anyio uses underneath. Client: `anyio.open_process`
pipes; sequential calls write then read directly, 64 in flight go through one
batching writer task and one reader task.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import deque
from collections.abc import Callable

import anyio
import anyio.abc
import msgspec

from bench._children import die_with_parent, python_module, stop_process
from bench._measure import (
    BatchedSender,
    Pending,
    decode_reply,
    encode_request,
    measure_calls,
    split_lines,
)
from bench._registry import Measurement, RunContext, scenario

#: trio's and anyio's own read size; asyncio's pipe transport reads 256 KiB at once.
READ_SIZE = 65536


def _echo_lines() -> Callable[[bytearray, bytes], bytes]:
    decoder = msgspec.json.Decoder()
    encoder = msgspec.json.Encoder()

    def echo(buffer: bytearray, chunk: bytes) -> bytes:
        lines = split_lines(buffer, chunk)
        return b"".join([encoder.encode(decoder.decode(line)) + b"\n" for line in lines])

    return echo


async def _serve_asyncio() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, sys.stdout.buffer
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    echo, buffer = _echo_lines(), bytearray()
    while chunk := await reader.read(READ_SIZE):
        if out := echo(buffer, chunk):
            writer.write(out)
            await writer.drain()


async def _serve_trio() -> None:
    import trio

    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    echo, buffer = _echo_lines(), bytearray()
    while chunk := await stdin.receive_some(READ_SIZE):
        if out := echo(buffer, chunk):
            await stdout.send_all(out)


async def measure_pipe(process: anyio.abc.Process, ctx: RunContext) -> Measurement:
    """Echo calls over a child's stdin/stdout."""
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    buffer = bytearray()
    if ctx.mode == "sequential":
        lines: deque[bytes] = deque()

        async def call_direct() -> None:
            await stdin.send(encode_request(0) + b"\n")
            while not lines:
                lines.extend(split_lines(buffer, await stdout.receive(READ_SIZE)))
            decode_reply(lines.popleft())

        return await measure_calls(call_direct, ctx)

    pending = Pending()
    sender = BatchedSender(stdin)

    async def read_replies() -> None:
        while True:
            for line in split_lines(buffer, await stdout.receive(READ_SIZE)):
                pending.resolve(decode_reply(line))

    async def call() -> None:
        call_id, done = pending.open()
        sender.send_nowait(encode_request(call_id) + b"\n")
        await done.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read_replies)
        tg.start_soon(sender.run)
        result = await measure_calls(call, ctx)
        tg.cancel_scope.cancel()
    return result


@scenario("pipe-raw", group="stdio", description="raw anyio pipe, one JSON object per line")
async def pipe_raw(ctx: RunContext) -> Measurement:
    command = python_module(__name__, ctx.backend)
    process = await anyio.open_process(command, stderr=None)
    try:
        return await measure_pipe(process, ctx)
    finally:
        await stop_process(process)


def main() -> None:
    die_with_parent()
    backend = sys.argv[1] if len(sys.argv) > 1 else "asyncio"
    anyio.run(_serve_trio if backend == "trio" else _serve_asyncio, backend=backend)


if __name__ == "__main__":
    main()
