"""Back to the caller, mid-call: the live echo agent logs to its caller, asks it for
input (elicitation) and asks its model (sampling), over a real stdio link; and through
the orchestrator, an agent's asks climb back to whoever called it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from mesh import (
    EMBEDDER,
    Agent,
    AgentSpec,
    CallTimeout,
    InvalidParams,
    MeshOrchestrator,
    MethodNotFound,
    RequestContext,
    local_connector,
)
from mesh.agents.echo import agent as echo_agent
from mesh.testing import open_echo_agent, spawn_nats_server
from tests.cluster._helpers import open_member, wait_status

pytestmark = pytest.mark.anyio

SAMPLED = {
    "role": "assistant",
    "content": {"type": "text", "text": "forty-two"},
    "model": "test-model",
    "stopReason": "endTurn",
}


async def answer_blue(params: dict[str, Any]) -> dict[str, Any]:
    assert params["requestedSchema"]["properties"]["answer"] == {"type": "string"}
    return {"action": "accept", "content": {"answer": f"blue, to {params['message']!r}"}}


async def answer_model(params: dict[str, Any]) -> dict[str, Any]:
    assert params["maxTokens"] == 100
    assert params["messages"][0]["content"] == {"type": "text", "text": "the answer?"}
    return SAMPLED


async def test_an_agent_logs_elicits_and_samples_through_its_callers_handlers() -> None:
    logs: list[Mapping[str, Any]] = []
    async with open_echo_agent() as peer:
        said = await peer.call_tool("chatter", {"message": "hello"}, on_log=logs.append)
        assert said == {"message": "hello"}
        assert [(log["level"], log["data"], log["logger"]) for log in logs] == [
            ("info", "hello", "echo")
        ]
        asked = await peer.call_tool("ask", {"question": "colour?"}, on_elicit=answer_blue)
        assert asked == {"action": "accept", "answer": "blue, to 'colour?'"}
        thought = await peer.call_tool("think", {"prompt": "the answer?"}, on_sample=answer_model)
        assert thought == {"text": "forty-two", "model": "test-model"}


async def test_a_call_without_the_handler_is_refused_at_once_and_the_link_lives() -> None:
    async with open_echo_agent() as peer:
        with anyio.fail_after(10):  # at once: never the call's 30 s deadline
            with pytest.raises(MethodNotFound, match="takes no elicitation"):
                await peer.call_tool("ask", {"question": "colour?"})
            with pytest.raises(MethodNotFound, match="takes no sampling"):
                await peer.call_tool("think", {"prompt": "hm"}, on_elicit=answer_blue)
        # a log with no on_log is dropped, as MCP allows
        assert await peer.call_tool("chatter", {"message": "x"}) == {"message": "x"}
        assert await peer.call_tool("echo", {"message": "alive"}) == {"message": "alive"}


async def test_a_bad_answer_is_refused_with_what_it_lacks() -> None:
    async def wrong(params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "maybe"}

    async with open_echo_agent() as peer:
        with pytest.raises(InvalidParams, match="answered no ElicitResult"):
            await peer.call_tool("ask", {"question": "colour?"}, on_elicit=wrong)


async def test_an_elicitation_nobody_answers_fails_at_the_calls_deadline() -> None:
    answering, withdrawn = anyio.Event(), anyio.Event()

    async def never(params: dict[str, Any]) -> dict[str, Any]:
        answering.set()
        try:
            await anyio.sleep_forever()
        finally:
            withdrawn.set()  # the agent, cancelled at the deadline, took its ask back
        raise AssertionError("unreachable")

    async with open_echo_agent() as peer:
        with anyio.fail_after(10), pytest.raises(CallTimeout) as timed_out:
            await peer.call_tool("ask", {"question": "anyone?"}, on_elicit=never, timeout=0.5)
        assert "no response within 0.5 s; the agent's elicitation was still waiting for an" in str(
            timed_out.value
        )
        assert answering.is_set()
        with anyio.fail_after(10):
            await withdrawn.wait()
        assert await peer.call_tool("echo", {"message": "alive"}) == {"message": "alive"}


async def test_an_ask_naming_no_call_in_flight_is_refused_and_the_link_lives() -> None:
    async with open_echo_agent() as peer:
        ask = {"call": "not-a-call", "kind": "elicit", "params": {"message": "?"}}
        with pytest.raises(InvalidParams, match="not in flight"):
            await peer.call("mesh/ask", ask)
        with pytest.raises(InvalidParams, match="invalid mesh/ask params"):
            await peer.call("mesh/ask", {"call": "x", "kind": "guess", "params": {}})
        assert await peer.call_tool("echo", {"message": "alive"}) == {"message": "alive"}


front = Agent("front", description="Asks echo on its caller's behalf.")


@front.tool
async def ask_echo(question: str, ctx: RequestContext) -> dict[str, Any]:
    """Call echo's ``ask``; its elicitation climbs back through us to our caller."""

    async def forward(params: dict[str, Any]) -> Any:
        return await ctx.ask("elicit", params)

    reply = {"name": "ask", "arguments": {"question": question}}
    result: dict[str, Any] = await ctx.call_agent("echo", "tools/call", reply, on_elicit=forward)
    return result


async def test_an_agents_ask_climbs_back_through_the_agent_that_called_it() -> None:
    specs = [
        AgentSpec("echo", local_connector(echo_agent)),
        AgentSpec("front", local_connector(front)),
    ]
    async with MeshOrchestrator(specs) as mesh:
        me = mesh.acting_for(EMBEDDER)
        answer = await me.call_tool(
            "front", "ask_echo", {"question": "sky?"}, on_elicit=answer_blue
        )
        assert answer == {"action": "accept", "answer": "blue, to 'sky?'"}
        with anyio.fail_after(10), pytest.raises(MethodNotFound, match="takes no elicitation"):
            await me.call_tool("front", "ask_echo", {"question": "sky?"})


async def test_an_agent_on_another_daemon_logs_and_asks_its_caller_across_nats() -> None:
    """The daemons' link is a peer like any other: an agent's logs and asks cross it to
    the caller on the other daemon, and a caller with no handler is refused at once."""
    logs: list[Mapping[str, Any]] = []
    async with (
        spawn_nats_server() as nats,
        open_member(nats.url, "a", [AgentSpec("echo", local_connector(echo_agent))]),
        open_member(nats.url, "b") as b,
    ):
        await wait_status(b.mesh.registry, "echo")
        me = b.mesh.acting_for(EMBEDDER)
        with anyio.fail_after(20):
            asked = await me.call_tool("echo", "ask", {"question": "sky?"}, on_elicit=answer_blue)
            assert asked == {"action": "accept", "answer": "blue, to 'sky?'"}
            thought = await me.call_tool(
                "echo", "think", {"prompt": "the answer?"}, on_sample=answer_model
            )
            assert thought == {"text": "forty-two", "model": "test-model"}
            said = await me.call_tool("echo", "chatter", {"message": "hi"}, on_log=logs.append)
            assert said == {"message": "hi"}
            assert [(log["level"], log["data"]) for log in logs] == [("info", "hi")]
        with anyio.fail_after(10), pytest.raises(MethodNotFound, match="takes no elicitation"):
            await me.call_tool("echo", "ask", {"question": "sky?"})
        assert await me.call_tool("echo", "echo", {"message": "alive"}) == {"message": "alive"}
