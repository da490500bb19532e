"""The stdio bridge the conformance suite measures ``mesh mcp`` through is transparent:
every line goes through as it came, routed only by ``id`` and ``method``, and the
bridge answers nothing an MCP server answers.

The child is a script that answers each request with a fixed dance: a notification,
a request of its own (answered back through the bridge), then its response, so each
rule of the routing is seen on the wire.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.mcp.stdio_bridge import open_stdio_bridge

pytestmark = pytest.mark.anyio

#: Echoes each request back inside its response, after a log line; a `tools/call` first
#: asks the client a question and answers with the client's answer. A notification is
#: announced on the next line written (unasked: the bridge's GET stream).
CHILD = textwrap.dedent(
    """
    import json, sys

    def say(line):
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()

    for raw in sys.stdin:
        message = json.loads(raw)
        if "method" not in message:
            continue  # an answer: read where it is asked for, below
        if "id" not in message:
            heard = '{"jsonrpc":"2.0","method":"notifications/heard","params":{"got":%s}}'
            say(heard % raw.strip())
            continue
        say('{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"log"}}')
        answer = None
        if message["method"] == "tools/call":
            say('{"jsonrpc":"2.0","id":"ask-1","method":"elicitation/create","params":{}}')
            answer = json.loads(sys.stdin.readline())
        result = {"echo": raw.strip(), "answer": answer}
        say(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}, indent=None))
    """
)

ACCEPT = {"accept": "application/json, text/event-stream"}
#: An id the child must get back exactly: a string that looks like a number, spaced oddly.
INITIALIZE = b'{"jsonrpc":"2.0",  "id":"7","method":"initialize","params":{"x":1}}'


def _events(body: str) -> list[str]:
    """The ``data:`` of each event of a whole SSE body."""
    return [line.removeprefix("data: ") for line in body.splitlines() if line.startswith("data: ")]


async def test_lines_pass_unchanged_and_only_http_is_answered(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    async with (
        open_stdio_bridge([sys.executable, str(script)]) as bridge,
        httpx.AsyncClient(base_url=bridge.url, timeout=30) as http,
    ):
        opened = await http.post("/mcp", content=INITIALIZE, headers=ACCEPT)
        assert opened.status_code == 200
        assert opened.headers["content-type"] == "text/event-stream"
        session = {"mcp-session-id": opened.headers["mcp-session-id"], **ACCEPT}
        log, answer = _events(opened.text)
        assert log == '{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"log"}}'
        assert json.loads(answer)["id"] == "7"  # the response ends the request's stream
        assert json.loads(answer)["result"]["echo"] == INITIALIZE.decode()  # byte for byte

        # A request the child asks mid-call rides the call's stream; its answer is POSTed.
        async with (
            http.stream(
                "POST",
                "/mcp",
                json={"jsonrpc": "2.0", "id": 8, "method": "tools/call"},
                headers=session,
            ) as call,
        ):
            lines = call.aiter_lines()
            asked = await _next_event(lines)
            assert json.loads(asked)["method"] == "notifications/message"
            asked = await _next_event(lines)
            assert json.loads(asked) == {
                "jsonrpc": "2.0",
                "id": "ask-1",
                "method": "elicitation/create",
                "params": {},
            }
            reply = {"jsonrpc": "2.0", "id": "ask-1", "result": {"action": "decline"}}
            posted = await http.post("/mcp", json=reply, headers=session)
            assert posted.status_code == 202
            done = json.loads(await _next_event(lines))
            assert [line async for line in lines if line] == []  # the response ended it
        assert done["id"] == 8 and done["result"]["answer"] == reply

        # A notification is 202; what the child says unasked waits for the GET stream.
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post("/mcp", json=note, headers=session)).status_code == 202
        async with http.stream("GET", "/mcp", headers=session) as listening:
            lines = listening.aiter_lines()
            heard = json.loads(await _next_event(lines))
            assert heard["method"] == "notifications/heard" and heard["params"]["got"] == note
            # DELETE ends the session, its child and so its streams.
            assert (await http.delete("/mcp", headers=session)).status_code == 204
            assert [line async for line in lines if line] == []

        # HTTP's own refusals say they are the bridge's; the child is never asked.
        ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
        unsessioned = await http.post("/mcp", json=ping, headers=ACCEPT)
        assert unsessioned.status_code == 400 and "stdio bridge" in unsessioned.text
        unknown = await http.post("/mcp", json=ping, headers={**ACCEPT, "mcp-session-id": "x"})
        assert unknown.status_code == 404
        batch = await http.post("/mcp", json=[ping], headers=ACCEPT)
        assert batch.status_code == 400 and "one JSON-RPC message" in batch.text
        gone = await http.post("/mcp", json=ping, headers=session)
        assert gone.status_code == 404


async def _next_event(lines: Any) -> str:
    """The next ``data:`` line of an SSE body (bounded: the child answers at once)."""
    with anyio.fail_after(30):
        async for line in lines:
            if line.startswith("data: "):
                return str(line.removeprefix("data: "))
    raise AssertionError("the stream ended")


#: Answers ``initialize`` with the value of ``BRIDGE_TEST`` in its environment.
ENV_CHILD = textwrap.dedent(
    """
    import json, os, sys

    for raw in sys.stdin:
        message = json.loads(raw)
        result = {"env": os.environ.get("BRIDGE_TEST")}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}))
        sys.stdout.write("\\n")
        sys.stdout.flush()
    """
)


async def test_the_first_child_gets_env_and_later_ones_later_env(tmp_path: Path) -> None:
    script = tmp_path / "env_child.py"
    script.write_text(ENV_CHILD)
    first, later = {"BRIDGE_TEST": "first"}, {"BRIDGE_TEST": "later"}
    async with (
        open_stdio_bridge([sys.executable, str(script)], env=first, later_env=later) as bridge,
        httpx.AsyncClient(base_url=bridge.url, timeout=30) as http,
    ):
        seen = []
        for wire_id in range(3):
            initialize = {"jsonrpc": "2.0", "id": wire_id, "method": "initialize"}
            opened = await http.post("/mcp", json=initialize, headers=ACCEPT)
            assert opened.status_code == 200
            (answer,) = _events(opened.text)
            seen.append(json.loads(answer)["result"]["env"])
    assert seen == ["first", "later", "later"]
