"""The physical floor of serving MCP through the mesh: the same process hops, no mesh code.

``mesh mcp`` relays an MCP host's stdio to the daemon's ``/mcp`` WebSocket, and the
daemon calls its echo agent over the agent's stdio: three process hops each way
(host -> relay -> daemon -> agent). Over HTTP, the daemon's ``/mcp`` takes the POST
and calls the agent: two. These children make the same hops with the same framing
(JSON-RPC lines over pipes, WebSocket text frames, one POST per message) and the
least Python that can: no parsing on the way, no sessions, no authorization, no
correlation, no task per message; only the agent decodes the request and encodes an
MCP ``CallToolResult``, as an echo tool's server must.

- On asyncio every hop is a protocol callback (``data_received`` writes straight to
  the other side's transport): one loop iteration per hop, no task.
- On trio each direction is one task looping ``receive_some`` / ``send_all`` on the
  backend's own streams (``FdStream``, ``SocketStream``, a process's pipes).
- WebSocket frames are built and parsed here (masked from the client, as the protocol
  wants; websockets' C ``apply_mask``), after a minimal upgrade handshake. HTTP is h11.

::

    python -m bench.baselines.mcp_relay agent BACKEND       # the echo tool on stdio
    python -m bench.baselines.mcp_relay hub BACKEND         # WebSocket -> agent; prints PORT
    python -m bench.baselines.mcp_relay relay BACKEND URL   # stdio -> the hub's WebSocket
    python -m bench.baselines.mcp_relay http BACKEND        # POST -> agent; prints PORT

A client drives ``relay`` (stdio) or ``http`` exactly as it drives ``mesh mcp`` and the
daemon's ``/mcp`` (``bench/mcp_scenarios.py``). Sequential calls only: it is the floor
of a round trip, not a server that multiplexes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec

from bench._children import announce_port, die_with_parent, python_module
from bench._measure import split_lines
from bench.baselines import _relay_io as io

Transform = Callable[[bytes], bytes]


class _Call(msgspec.Struct):
    id: int | str | None = None
    method: str = ""
    params: Any = None


def agent_transform() -> Transform:
    """The echo tool's server: each ``tools/call`` line answered with its arguments as
    the result (text and structured, as the mesh's /mcp answers), other requests ``{}``."""
    decode = msgspec.json.Decoder(_Call).decode
    encode = msgspec.json.Encoder().encode
    buffer = bytearray()

    def answer(line: bytes) -> bytes:
        call = decode(line)
        if call.id is None:
            return b""  # a notification
        result: dict[str, Any] = {}
        if call.method == "tools/call":
            arguments = call.params.get("arguments") or {}
            result = {
                "content": [{"type": "text", "text": encode(arguments).decode()}],
                "structuredContent": arguments,
                "isError": False,
            }
        return encode({"jsonrpc": "2.0", "id": call.id, "result": result}) + b"\n"

    return lambda chunk: b"".join([answer(line) for line in split_lines(buffer, chunk) if line])


def lines_to_frames(*, masked: bool) -> Transform:
    buffer = bytearray()
    return lambda chunk: b"".join(
        [io.ws_frame(line, masked=masked) for line in split_lines(buffer, chunk)]
    )


def frames_to_lines() -> Transform:
    frames = io.FrameReader()
    return lambda chunk: b"".join([payload + b"\n" for payload in frames.feed(chunk)])


def agent_command(backend: str) -> list[str]:
    return python_module("bench.baselines.mcp_relay", "agent", backend)


def main() -> None:
    die_with_parent()
    role, backend, *rest = sys.argv[1:]
    if role == "agent":
        io.run_stdio(backend, agent_transform())
    elif role == "relay":
        io.run_relay(backend, rest[0], lines_to_frames(masked=True), frames_to_lines())
    elif role == "hub":
        up, down = frames_to_lines(), lines_to_frames(masked=False)
        io.run_hub(backend, agent_command(backend), up, down, announce_port)
    elif role == "http":
        io.run_http(backend, agent_command(backend), announce_port)
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
