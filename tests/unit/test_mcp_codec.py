"""MCP's JSON-RPC as a session codec, by hand: ids, cancel, progress, heartbeats, bad input."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesh import CallTimeout, InvalidParams, ProtocolError, ToolError
from mesh._rpc.session import (
    CallDone,
    CancelRequested,
    IncomingNotification,
    IncomingRequest,
    ProgressReported,
    Session,
    SessionConfig,
)
from mesh.mcp import MCP_CODEC, call_result, error_result, exposed_names, tool_result
from mesh.mcp._codec import from_wire_id, to_wire_id
from mesh.protocol import DecodeFailure, Heartbeat, Request, RequestPayload

QUIET = SessionConfig(heartbeat_interval=None)
wire_ids = st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.text(min_size=1, max_size=128)


def server() -> Session:
    return Session(now=0.0, config=QUIET, codec=MCP_CODEC, agent="client", transport="stdio")


def client(config: SessionConfig = QUIET) -> Session:
    return Session(now=0.0, config=config, codec=MCP_CODEC, agent="server", transport="stdio")


def frame(**fields: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **fields}).encode()


def sent(session: Session) -> list[dict[str, Any]]:
    return [json.loads(f) for f in session.data_to_send()]


@given(wire_ids)
def test_ids_come_back_exactly_as_sent(wire_id: int | str) -> None:
    assert to_wire_id(from_wire_id(wire_id)) == wire_id
    # a string that looks like a number stays a string, and the reverse
    assert type(to_wire_id(from_wire_id(wire_id))) is type(wire_id)


@pytest.mark.parametrize("wire_id", [0, 1, -7, "0", "abc", "#0", "##", "#"])
def test_a_request_is_answered_under_its_own_id(wire_id: int | str) -> None:
    peer = server()
    (request,) = peer.receive_frame(frame(id=wire_id, method="ping"), 0.0)
    assert isinstance(request, IncomingRequest)
    assert peer.send_response(request.id, None)
    assert sent(peer) == [{"jsonrpc": "2.0", "id": wire_id, "result": {}}]


def test_our_calls_cancels_and_progress_speak_mcp() -> None:
    ours = client()
    rid = ours.send_request("tools/call", {"name": "slow", "arguments": {}}, now=0.0, timeout=5)
    (request,) = sent(ours)
    assert request == {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": "slow", "arguments": {}, "_meta": {"progressToken": rid}},
    }
    progress = frame(
        method="notifications/progress", params={"progressToken": rid, "progress": 1, "total": 2}
    )
    (event,) = ours.receive_frame(progress, 4.0)
    assert isinstance(event, ProgressReported) and event.params["total"] == 2
    assert ours.deadline_of(rid) == pytest.approx(9.0)  # progress pushed the deadline out
    (done,) = ours.tick(10.0)
    assert isinstance(done, CallDone) and isinstance(done.error, CallTimeout)
    assert sent(ours) == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": rid, "reason": "timeout"},
        }
    ]


def test_a_peer_cancel_names_our_request_by_its_wire_id() -> None:
    peer = server()
    (request,) = peer.receive_frame(frame(id=0, method="tools/call", params={}), 0.0)
    assert isinstance(request, IncomingRequest)
    cancel = frame(method="notifications/cancelled", params={"requestId": 0, "reason": "bored"})
    (event,) = peer.receive_frame(cancel, 0.0)
    assert isinstance(event, CancelRequested)
    assert (event.id, event.reason) == (request.id, "bored")
    assert not peer.send_response(request.id, {})  # a cancelled request is not answered


def test_errors_map_both_ways() -> None:
    ours = client()
    rid = ours.send_request("tools/call", {"name": "x"}, now=0.0)
    ours.data_to_send()
    answer = frame(id=rid, error={"code": -32602, "message": "Unknown tool: x"})
    (done,) = ours.receive_frame(answer, 0.0)
    assert isinstance(done, CallDone)
    assert isinstance(done.error, InvalidParams) and "Unknown tool" in str(done.error)
    peer = server()
    (request,) = peer.receive_frame(frame(id=3, method="x"), 0.0)
    assert isinstance(request, IncomingRequest)
    peer.send_error(request.id, -32601, "no", {"why": 1})
    assert sent(peer) == [
        {"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "no", "data": {"why": 1}}}
    ]


def test_heartbeats_are_pings_and_any_answer_is_life() -> None:
    ours = client(SessionConfig(heartbeat_interval=1.0))
    ours.tick(1.5)
    (ping,) = sent(ours)
    assert ping["method"] == "ping" and ping["id"].startswith("mesh-heartbeat:")
    not_found = frame(id=ping["id"], error={"code": -32601, "message": "Method not found"})
    assert ours.receive_frame(not_found, 2.0) == []
    assert ours.statistics().heartbeats_received == 1
    assert ours.statistics().late_responses == 0


@pytest.mark.parametrize(
    ("raw", "code", "wire_id", "words"),
    [
        (b'{"jsonrpc":"2.0","id":7,"method":', -32700, 7, "not valid JSON"),
        (b"[" + frame(id=1, method="ping") + b"]", -32600, None, "batches are not supported"),
        (frame(id=1.5, method="ping"), -32600, None, "$.id"),
        (b'{"jsonrpc":"1.0","id":4,"method":"ping"}', -32600, 4, "$.jsonrpc"),
        (frame(id=None, method="ping"), -32600, None, "cannot be null"),
        (frame(id="x" * 129, method="ping"), -32600, None, "$.id"),
        (frame(id=9), -32600, 9, "neither a request"),
        (frame(id=2, method="m" * 300), -32600, 2, "$.method"),
        (b"[[[[" * 600, -32600, None, "batches"),
    ],
)
def test_bad_input_gets_a_jsonrpc_error_and_the_link_lives(
    raw: bytes, code: int, wire_id: Any, words: str
) -> None:
    peer = server()
    assert peer.receive_frame(raw, 0.0) == []
    (error,) = sent(peer)
    assert error["jsonrpc"] == "2.0" and error["id"] == wire_id
    assert error["error"]["code"] == code and words in error["error"]["message"]
    (request,) = peer.receive_frame(frame(id=10, method="ping"), 0.0)  # still serving
    assert isinstance(request, IncomingRequest)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_fail_cleanly(raw: bytes) -> None:
    try:
        MCP_CODEC.decode(raw)
    except DecodeFailure as failure:
        assert failure.code in (-32700, -32600) and failure.reason


def test_a_broken_response_fails_its_call_and_is_never_answered() -> None:
    ours = client()
    rid = ours.send_request("ping", now=0.0)
    ours.data_to_send()
    both = frame(id=rid, result={}, error={"code": 1, "message": "m"})
    (done,) = ours.receive_frame(both, 0.0)
    assert isinstance(done, CallDone) and isinstance(done.error, ProtocolError)
    assert ours.data_to_send() == []


def test_other_notifications_pass_through() -> None:
    peer = server()
    (event,) = peer.receive_frame(frame(method="notifications/initialized"), 0.0)
    assert isinstance(event, IncomingNotification)
    assert (event.method, event.params) == ("notifications/initialized", None)


def test_a_heartbeat_encodes_as_a_ping() -> None:
    raw = MCP_CODEC.encode(Heartbeat(id="abc", timestamp=0))
    assert msgspec.json.decode(raw) == {
        "jsonrpc": "2.0",
        "id": "mesh-heartbeat:abc",
        "method": "ping",
    }
    request = Request(id="#5", timestamp=0, payload=RequestPayload(method="tools/list"))
    assert msgspec.json.decode(MCP_CODEC.encode(request)) == {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/list",
    }


# -- what MCP results mean to the mesh, and back ------------------------------------------


def test_tool_results_become_mesh_results() -> None:
    text = {"content": [{"type": "text", "text": "hi"}]}
    assert tool_result("t", text) == "hi"
    assert tool_result("t", {**text, "structuredContent": {"a": 1}}) == {"a": 1}
    two = {"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "x"}]}
    assert tool_result("t", two) == {"$content": two["content"]}
    # anything but one text passes as mesh content, structured data beside it
    image = {"content": [two["content"][1]], "structuredContent": {"a": 1}}
    assert tool_result("t", image) == {"$content": image["content"], "$structured": {"a": 1}}
    assert tool_result("t", {"content": []}) == {"$content": []}
    with pytest.raises(ToolError, match="no such file") as raised:
        tool_result("t", {"content": [{"type": "text", "text": "no such file"}], "isError": True})
    assert raised.value.data["isError"] is True
    with pytest.raises(ToolError, match="more input"):
        tool_result("t", {"resultType": "input_required"})
    with pytest.raises(ProtocolError):
        tool_result("t", [1])


def test_mesh_results_become_call_tool_results() -> None:
    assert call_result({"a": 1}) == {
        "content": [{"type": "text", "text": '{"a":1}'}],
        "isError": False,
        "structuredContent": {"a": 1},
    }
    assert call_result("plain") == {
        "content": [{"type": "text", "text": "plain"}],
        "isError": False,
    }
    assert call_result(3, wrapped=True)["structuredContent"] == {"result": 3}
    assert error_result("boom") == {"content": [{"type": "text", "text": "boom"}], "isError": True}


def test_exposed_names_are_legal_unique_and_say_whose() -> None:
    names = exposed_names(
        [("echo", "echo"), ("calc.v2", "add"), ("a__b", "c"), ("a", "b__c"), ("x", "y" * 80)]
    )
    assert names["echo__echo"] == ("echo", "echo")
    assert len(names) == 5
    for name, (agent, _) in names.items():
        assert 0 < len(name) <= 64 and all(ch.isalnum() or ch in "_-" for ch in name), name
        assert name.startswith(agent[:1])
    clashing = [n for n, pair in names.items() if pair in {("a__b", "c"), ("a", "b__c")}]
    assert len(set(clashing)) == 2 and "a__b__c" not in names
    # the same set names the same way every time
    assert exposed_names(list(names.values())) == names
