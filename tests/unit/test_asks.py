"""The pure part of asking the caller mid-call: what an elicitation may ask for, the
params built for MCP, and which handler an ask goes to (or why it is refused)."""

from __future__ import annotations

from typing import Any

import pytest

from mesh import InvalidParams, MeshError, MethodNotFound
from mesh._errors import ErrorCode
from mesh._rpc.asks import (
    MAX_ASKS_IN_FLIGHT,
    AskHandlers,
    answer_ask,
    check_elicit_schema,
    log_params,
    resolve_ask,
    sample_params,
)
from mesh.protocol import RequestId


def test_an_elicitation_asks_only_for_a_flat_object_of_primitives() -> None:
    check_elicit_schema(
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "Ada"},
                "age": {"type": "integer"},
                "colours": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
            },
            "required": ["name"],
        }
    )
    with pytest.raises(InvalidParams, match="object schema"):
        check_elicit_schema({"type": "string"})
    with pytest.raises(InvalidParams, match="no nested objects"):
        check_elicit_schema({"type": "object", "properties": {"who": {"type": "object"}}})
    with pytest.raises(InvalidParams, match="list of enum strings"):
        check_elicit_schema({"type": "object", "properties": {"n": {"type": "array"}}})
    with pytest.raises(InvalidParams, match="`required` lists names"):
        check_elicit_schema({"type": "object", "properties": {}, "required": ["ghost"]})


def test_sampling_params_are_mcps_and_bad_ones_are_refused() -> None:
    params = sample_params("hi", max_tokens=5, system_prompt="be brief", temperature=None)
    assert params == {
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
        "maxTokens": 5,
        "systemPrompt": "be brief",
    }
    with pytest.raises(InvalidParams, match="max_tokens >= 1"):
        sample_params("hi", max_tokens=0)
    with pytest.raises(InvalidParams, match=r"role: user\|assistant"):
        sample_params([{"role": "system", "content": {}}], max_tokens=5)
    with pytest.raises(InvalidParams, match="unknown log level 'loud'"):
        log_params("call", "loud", "x", None)


async def _answer(params: dict[str, Any]) -> Any:
    return {"action": "cancel"}


def test_an_ask_goes_to_its_calls_handler_or_is_refused_saying_why() -> None:
    call = RequestId("c1")
    handlers: dict[RequestId, AskHandlers] = {call: {"on_elicit": _answer}, RequestId("c2"): {}}
    ask = {"call": "c1", "kind": "elicit", "params": {"message": "?"}}
    handler, kind, params = resolve_ask(ask, handlers, 0)
    assert (handler, kind, params) == (_answer, "elicit", {"message": "?"})
    with pytest.raises(MethodNotFound, match="takes no sampling"):
        resolve_ask({**ask, "kind": "sample"}, handlers, 0)
    with pytest.raises(MethodNotFound, match="takes no elicitation"):
        resolve_ask({**ask, "call": "c2"}, handlers, 0)
    with pytest.raises(InvalidParams, match="not in flight"):
        resolve_ask({**ask, "call": "gone"}, handlers, 0)
    with pytest.raises(InvalidParams, match=r"invalid mesh/ask params"):
        resolve_ask({"call": "c1"}, handlers, 0)
    with pytest.raises(MeshError, match="MAX_ASKS_IN_FLIGHT") as capped:
        resolve_ask(ask, handlers, MAX_ASKS_IN_FLIGHT)
    assert capped.value.code == ErrorCode.UNAVAILABLE


@pytest.mark.anyio
async def test_an_accepted_elicitation_gets_the_schemas_defaults_for_fields_it_leaves_out() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "verified": {"type": "boolean", "default": True},
            "note": {"type": "string"},
        },
    }
    params = {"message": "who?", "requestedSchema": schema}

    async def accept(params: dict[str, Any]) -> Any:
        return {"action": "accept", "content": {"name": "Ada"}}

    async def decline(params: dict[str, Any]) -> Any:
        return {"action": "decline"}

    answer = await answer_ask(accept, "elicit", params)
    assert answer == {
        "action": "accept",
        "content": {"name": "Ada", "age": 30, "verified": True},  # what was given stays
    }
    assert await answer_ask(decline, "elicit", params) == {"action": "decline"}
