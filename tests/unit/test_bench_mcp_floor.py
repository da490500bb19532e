"""The floor of serving MCP (bench/baselines/mcp_relay.py): its WebSocket frames, its echo
tool, and the target that divides the mesh's rate by it."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from bench._targets import evaluate
from bench.baselines._relay_io import FrameReader, upgrade_request, upgrade_response, ws_frame
from bench.baselines.mcp_relay import agent_transform, frames_to_lines, lines_to_frames


@pytest.mark.parametrize("size", [0, 5, 125, 126, 65535, 65536, 70000])
@pytest.mark.parametrize("masked", [False, True])
def test_frames_come_back_whole_however_the_bytes_are_cut(size: int, masked: bool) -> None:
    payloads = [os.urandom(size), b"second"]
    wire = b"".join(ws_frame(p, masked=masked) for p in payloads)
    reader = FrameReader()
    out: list[bytes] = []
    for start in range(0, len(wire), 997):  # cuts inside headers, masks and payloads
        out += reader.feed(wire[start : start + 997])
    assert out == payloads
    assert (wire[1] & 0x80 != 0) is masked


def test_a_relay_hop_carries_lines_as_text_frames_and_back() -> None:
    up, down = lines_to_frames(masked=True), frames_to_lines()
    frames = up(b'{"id":1}\n{"id"') + up(b":2}\n")
    assert down(frames) == b'{"id":1}\n{"id":2}\n'


def test_the_upgrade_answers_the_key_as_rfc_6455_says() -> None:
    answer = upgrade_response(upgrade_request("ws://127.0.0.1:1/"))
    # The RFC's own example key and accept value.
    assert b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in answer
    with pytest.raises(ValueError, match="not a WebSocket upgrade"):
        upgrade_response(b"GET / HTTP/1.1\r\n\r\n")


def test_the_echo_tool_answers_calls_as_the_mesh_does_and_not_notifications() -> None:
    answer = agent_transform()
    call = {"name": "echo__echo", "arguments": {"message": "hi"}}
    lines = [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call},
        {"jsonrpc": "2.0", "id": "x", "method": "ping"},
    ]
    out = answer(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["id"] == 7 and first["result"]["structuredContent"] == {"message": "hi"}
    assert json.loads(first["result"]["content"][0]["text"]) == {"message": "hi"}
    assert second == {"jsonrpc": "2.0", "id": "x", "result": {}}


def _row(scenario: str, backend: str, rate: float) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "mode": "sequential",
        "backend": backend,
        "figures": {"calls_per_s": rate},
        "higher_is_better": True,
        "trio_vs_asyncio": None,
    }


def test_serving_is_judged_against_the_floor_of_its_own_hops_and_backend() -> None:
    report = {
        "results": [
            _row("mesh-mcp-serve", "asyncio", 900),
            _row("mcp-relay-raw", "asyncio", 1000),
            _row("mesh-mcp-serve", "trio", 700),
            _row("mcp-relay-raw", "trio", 1000),
            _row("mesh-mcp-http", "asyncio", 800),
        ]
    }
    checks = {(c.target, c.backend): c for _, cs in evaluate(report) for c in cs}
    stdio = "MCP serving / raw relay of its hops, stdio sequential"
    assert checks[stdio, "asyncio"].value == pytest.approx(0.9)
    assert checks[stdio, "asyncio"].holds is True
    assert checks[stdio, "trio"].holds is False
    # no HTTP floor in this run: no verdict either way
    assert checks["MCP serving / raw relay of its hops, HTTP sequential", "asyncio"].holds is None
