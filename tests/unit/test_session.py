"""The session core, driven by hand: no sockets, no processes, no tasks, no sleeps."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from mesh import (
    AgentUnavailable,
    CallTimeout,
    ConnectionLost,
    ErrorCode,
    MessageTooLarge,
    ToolError,
)
from mesh._rpc.complaints import LOG_WINDOW
from mesh._rpc.session import (
    CallDone,
    CancelRequested,
    Event,
    IncomingNotification,
    IncomingRequest,
    ProgressReported,
    Session,
    SessionConfig,
)
from mesh.protocol import (
    MESH_CODEC,
    Request,
    RequestId,
    RequestPayload,
    Response,
    ResponsePayload,
)

QUIET = SessionConfig(heartbeat_interval=None)


def pair(config: SessionConfig = QUIET) -> tuple[Session, Session]:
    """(client, server); each is labelled with the agent it talks to."""
    return (
        Session(now=0.0, config=config, agent="server", transport="memory"),
        Session(now=0.0, config=config, agent="client", transport="memory"),
    )


def deliver(src: Session, dst: Session, now: float = 0.0) -> list[Any]:
    events: list[Any] = []
    for frame in src.data_to_send():
        events.extend(dst.receive_frame(frame, now))
    return events


def calls_done(events: list[Event]) -> list[CallDone]:
    """The events, each asserted to be a finished call of ours."""
    assert all(isinstance(e, CallDone) for e in events), events
    return [e for e in events if isinstance(e, CallDone)]


def decoded(session: Session) -> list[Any]:
    return [MESH_CODEC.decode(frame) for frame in session.data_to_send()]


def test_calls_complete_out_of_order_and_match_their_ids() -> None:
    client, server = pair()
    ids = [client.send_request("tools/call", {"n": n}, now=0.0) for n in range(5)]
    requests = deliver(client, server)
    assert [type(e) for e in requests] == [IncomingRequest] * 5
    for request in reversed(requests):
        assert server.send_response(request.id, {"n": request.params["n"] * 10})
    done = deliver(server, client)
    assert [d.id for d in done] == list(reversed(ids))
    assert {d.id: d.result["n"] for d in done} == {rid: n * 10 for n, rid in enumerate(ids)}
    stats = client.statistics()
    assert (stats.calls_started, stats.calls_succeeded, stats.calls_in_flight) == (5, 5, 0)


def test_error_response_becomes_the_matching_exception_with_context() -> None:
    client, server = pair()
    client.send_request("tools/call", {"name": "fail", "arguments": {}}, now=0.0)
    (request,) = deliver(client, server)
    server.send_error(request.id, ErrorCode.TOOL_ERROR, "boom")
    (done,) = deliver(server, client)
    assert isinstance(done.error, ToolError)
    assert done.error.code == ErrorCode.TOOL_ERROR
    assert str(done.error) == "boom (method 'tools/call fail', agent 'server', over memory)"


def test_deadline_expiry_fails_the_call_and_tells_the_peer() -> None:
    client, server = pair()
    rid = client.send_request("tools/call", {"name": "sleep"}, now=0.0, timeout=2.0)
    (request,) = deliver(client, server)
    assert client.next_deadline() == 2.0
    assert client.tick(1.999) == []
    (done,) = calls_done(client.tick(2.0))
    assert done.id == rid and isinstance(done.error, CallTimeout)
    assert "no response within 2 s" in str(done.error) and "tools/call sleep" in str(done.error)
    (cancel,) = deliver(client, server)
    assert cancel == CancelRequested(request.id, "timeout")
    assert server.send_response(request.id, "too late") is False  # nothing is sent
    assert server.data_to_send() == []


def test_caller_cancel_sends_cancelled_and_a_late_response_is_dropped() -> None:
    client, server = pair()
    rid = client.send_request("slow", None, now=0.0)
    (request,) = deliver(client, server)
    assert client.cancel_call(rid) is True
    assert client.cancel_call(rid) is False
    (cancel,) = deliver(client, server)
    assert isinstance(cancel, CancelRequested) and cancel.reason == "cancelled by caller"
    # The server answered before it saw the cancel: the late answer is dropped.
    late = MESH_CODEC.encode(
        Response(id=request.id, timestamp=0, payload=ResponsePayload(success=True))
    )
    assert client.receive_frame(late, 0.1) == []
    assert client.statistics().late_responses == 1


def test_progress_extends_the_deadline_up_to_the_hard_maximum() -> None:
    config = SessionConfig(heartbeat_interval=None, max_call_duration=5.0)
    client, server = pair(config)
    rid = client.send_request("work", None, now=0.0, timeout=2.0)
    (request,) = deliver(client, server)
    server.report_progress(request.id, 1, 10, "one")
    (progress,) = deliver(server, client, now=1.5)
    assert isinstance(progress, ProgressReported) and progress.params["progress"] == 1
    assert client.deadline_of(rid) == 3.5
    assert client.tick(2.0) == []  # the original deadline passed harmlessly
    server.report_progress(request.id, 2)
    deliver(server, client, now=4.0)
    assert client.deadline_of(rid) == 5.0  # capped: started at 0, max 5 s
    (done,) = calls_done(client.tick(5.0))
    assert isinstance(done.error, CallTimeout)


def test_heartbeats_are_sent_every_interval_and_silence_kills_the_link() -> None:
    config = SessionConfig(heartbeat_interval=1.0)
    client = Session(now=0.0, config=config, agent="echo", transport="stdio")
    rid = client.send_request("ping", None, now=0.0, timeout=100.0)
    client.data_to_send()
    assert client.next_deadline() == 1.0
    assert client.tick(1.0) == []
    (beat,) = decoded(client)
    assert type(beat).__name__ == "Heartbeat"
    # A frame from the peer at 2.5 keeps it alive until 5.5 (TTL = 3 x interval).
    client.receive_frame(MESH_CODEC.encode(beat), 2.5)
    client.tick(5.4)
    assert not client.closed
    (done,) = calls_done(client.tick(5.5))
    assert done.id == rid and isinstance(done.error, ConnectionLost)
    assert "peer sent nothing for 3.0 s (heartbeat TTL 3 s)" in str(done.error)
    assert client.close_error is not None  # closed, remembering why
    with pytest.raises(ConnectionLost, match="heartbeat TTL"):
        client.send_request("ping", None, now=6.0)


def test_connection_lost_fails_every_pending_call_with_the_cause() -> None:
    client, _ = pair()
    ids = {client.send_request("m", None, now=0.0) for _ in range(3)}
    cause = ConnectionLost("agent process 42 was killed by SIGKILL (exit status -9)")
    cause.exit_code = -9
    cause.stderr_tail = ("last words",)
    events = calls_done(client.connection_lost(cause))
    assert {e.id for e in events} == ids
    for event in events:
        assert isinstance(event.error, ConnectionLost)
        assert event.error.exit_code == -9 and event.error.stderr_tail == ("last words",)
        assert "SIGKILL" in str(event.error)
    assert client.connection_lost(cause) == []  # only once
    assert client.next_deadline() is None


@pytest.mark.parametrize(
    ("frame", "code", "fragment", "rid"),
    [
        (b"not json", ErrorCode.PARSE_ERROR, "not valid JSON", None),
        (
            b'{"type":"request","id":"a1","timestamp":1,"payload":{"method":7}}',
            ErrorCode.INVALID_REQUEST,
            "`$.payload.method`",
            "a1",
        ),
        (
            b'{"type":"bogus","id":"b2","timestamp":1,"payload":{}}',
            ErrorCode.INVALID_REQUEST,
            "`$.type`",
            "b2",
        ),
        (b'{"type":"request","id":"c3","timestamp":1}', ErrorCode.INVALID_REQUEST, "payload", "c3"),
        (
            b'{"type":"request","id":"d4","timestamp":"x","payload":{"method":"m"}}',
            ErrorCode.INVALID_REQUEST,
            "`$.timestamp`",
            "d4",
        ),
        (b"[1,2,3]", ErrorCode.INVALID_REQUEST, "Expected `object`", None),
        (
            b'{"type":"request","id":"e5", "timestamp":1, "payload":{"meth',
            ErrorCode.PARSE_ERROR,
            "JSON",
            "e5",
        ),
    ],
)
def test_invalid_frames_get_an_error_reply_naming_the_problem(
    frame: bytes, code: ErrorCode, fragment: str, rid: str | None
) -> None:
    _, server = pair()
    assert server.receive_frame(frame, 0.0) == []
    (reply,) = decoded(server)
    assert isinstance(reply, Response) and reply.id == rid
    assert reply.payload.error is not None
    assert reply.payload.error.code == code
    assert fragment in reply.payload.error.message
    assert server.statistics().invalid_frames == 1


def test_a_broken_response_is_never_answered_but_fails_its_call() -> None:
    client, _ = pair()
    rid = client.send_request("m", None, now=0.0)
    client.data_to_send()
    bad = b'{"type":"response","id":"%s","timestamp":1,"payload":{"success":false}}' % rid.encode()
    (done,) = calls_done(client.receive_frame(bad, 0.0))
    assert done.id == rid and "needs an error" in str(done.error)
    assert client.data_to_send() == []
    assert client.receive_frame(b'{"type":"response","id":"zzz","payload":1}', 0.0) == []
    assert client.data_to_send() == []


def test_size_limit_on_send_and_receive() -> None:
    config = SessionConfig(heartbeat_interval=None, max_frame_size=200)
    client, server = pair(config)
    with pytest.raises(MessageTooLarge, match="exceeds the 200-byte limit"):
        client.send_request("m", {"x": "y" * 300}, now=0.0)
    assert client.statistics().calls_in_flight == 0
    big = MESH_CODEC.encode(
        Request(id="r-big", timestamp=1, payload=RequestPayload(method="m", params="z" * 300))
    )
    server.receive_frame(big, 0.0)
    (reply,) = decoded(server)
    assert reply.id == "r-big" and reply.payload.error.code == ErrorCode.TOO_LARGE
    # A result too large to send becomes an error answer, not silence.
    client.send_request("m", None, now=0.0)
    (request,) = deliver(client, server)
    server.send_response(request.id, "w" * 500)
    (done,) = deliver(server, client)
    assert isinstance(done.error, MessageTooLarge)


def test_oversized_response_fails_the_call_it_belongs_to() -> None:
    client, _ = pair()
    rid = client.send_request("m", None, now=0.0)
    client.data_to_send()
    head = (
        b'{"type":"response","id":"%s","timestamp":1,"payload":{"success":true,"result":"'
        % rid.encode()
    )
    (done,) = calls_done(client.receive_oversized(5_000_000, head, 0.0))
    assert done.id == rid and isinstance(done.error, MessageTooLarge)
    assert client.data_to_send() == []


@pytest.mark.parametrize(
    ("head", "tail"),
    [  # the TypeScript SDK writes the id last; the Python SDK first
        (
            b'{"result":{"content":[{"type":"text","text":"a \\"method\\" in it',
            b'"}]},"jsonrpc":"2.0","id":7}',
        ),
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"', b'x"}]}}'),
    ],
)
def test_an_oversized_jsonrpc_answer_fails_its_call_and_is_not_answered(
    head: bytes, tail: bytes
) -> None:
    from mesh.mcp import MCP_CODEC

    session = Session(now=0.0, config=QUIET, codec=MCP_CODEC, agent="fs", transport="stdio")
    session.send_request("tools/call", {"name": "read"}, now=0.0, request_id=RequestId("#7"))
    session.data_to_send()
    (done,) = calls_done(session.receive_oversized(2_000_000, head, 0.0, tail))
    assert isinstance(done.error, MessageTooLarge) and done.id == "#7"
    assert str(done.error) == (
        "answer of 2000000 bytes exceeds the 1048576-byte limit of agent 'fs' (max_frame_size)"
        " (method 'tools/call read', over stdio)"
    )
    assert session.data_to_send() == []  # nothing goes back to the server


def test_an_answer_that_is_not_json_says_so_in_plain_words() -> None:
    client, _ = pair()
    rid = client.send_request("m", None, now=0.0)
    client.data_to_send()
    broken = b'{"type":"response","id":"%s","payload":{"success":true,' % rid.encode()
    (done,) = calls_done(client.receive_frame(broken, 0.0))
    assert str(done.error).startswith("bad answer from the peer: not valid JSON"), done.error


def test_a_forwarded_error_names_where_it_happened_once() -> None:
    inner = MessageTooLarge("too big", agent="fs", method="tools/call read", transport="stdio")
    outer = MessageTooLarge(str(inner), agent="fs", method="tools/call read", transport="stdio")
    assert str(outer) == "too big (method 'tools/call read', agent 'fs', over stdio)"


def test_notifications_and_duplicate_ids() -> None:
    client, server = pair()
    client.send_notification("room/event", {"n": 1})
    (note,) = deliver(client, server)
    assert note == IncomingNotification("room/event", {"n": 1})
    client.send_request("m", None, now=0.0, request_id=RequestId("dup"))
    client.send_request("m", None, now=0.0, request_id=RequestId("dup2"))
    frames = client.data_to_send()
    server.receive_frame(frames[0], 0.0)
    server.receive_frame(frames[0], 0.0)
    (reply,) = decoded(server)
    assert (
        reply.payload.error.code == ErrorCode.INVALID_REQUEST
        and "duplicate" in reply.payload.error.message
    )


def test_completed_calls_do_not_accumulate_deadlines() -> None:
    client, server = pair()
    for _ in range(5_000):
        client.send_request("m", None, now=0.0)
        (request,) = deliver(client, server)
        server.send_response(request.id, None)
        deliver(server, client)
    assert len(client._calls._deadlines) < 1_000
    assert client.statistics().calls_succeeded == 5_000


def test_unanswered_done_events_carry_results() -> None:
    client, server = pair()
    rid = client.send_request("m", [1, 2], now=0.0)
    (request,) = deliver(client, server)
    assert request.params == [1, 2]
    server.send_response(request.id, None)
    assert deliver(server, client) == [CallDone(rid, result=None)]


def test_a_quiet_peer_is_asked_to_answer_and_a_healthy_idle_one_stays_alive() -> None:
    # Our interval is short; the peer's own heartbeats are rare (its default 10 s).
    ours = Session(now=0.0, config=SessionConfig(heartbeat_interval=0.2), agent="idle")
    theirs = Session(now=0.0, config=SessionConfig(heartbeat_interval=10.0), agent="caller")
    now = 0.0
    for _ in range(20):  # 4 s: far beyond our 0.6 s TTL
        now += 0.2
        ours.tick(now)
        deliver(ours, theirs, now)  # our beat asks for an answer...
        deliver(theirs, ours, now)  # ...and the idle peer gives one
    assert not ours.closed
    assert theirs.statistics().heartbeats_sent >= 10  # it answered the beats that asked


def test_a_heartbeat_that_asks_for_nothing_is_not_answered() -> None:
    ours = Session(now=0.0, config=SessionConfig(heartbeat_interval=1.0))
    theirs = Session(now=0.0, config=SessionConfig(heartbeat_interval=None))
    ours.receive_frame(b'{"type":"heartbeat","id":"x","timestamp":1,"payload":{}}', 0.5)
    ours.tick(1.0)  # heard from the peer 0.5 s ago: a plain beat
    (beat,) = ours.data_to_send()
    assert b'"reply"' not in beat
    assert theirs.receive_frame(beat, 1.0) == []
    assert theirs.data_to_send() == []


def test_deeply_nested_frames_are_answered_not_fatal() -> None:
    _, server = pair()
    deep = b'{"type":"request","id":"deep","timestamp":1,"payload":{"method":"m","params":'
    deep += b"[" * 5000 + b"]" * 5000 + b"}}"
    assert server.receive_frame(deep, 0.0) == []
    (reply,) = decoded(server)
    assert reply.id == "deep" and "nested too deeply" in reply.payload.error.message


@pytest.mark.parametrize(
    ("frame", "rid"),
    [
        (b'{"type":"request","id":"u1","timestamp":1,"payload":{"method":"\xff"}}', "u1"),
        (
            b'{"type":"request","id":"u2","timestamp":1,"payload":{"method":"x","params":"\xc3("}}',
            "u2",
        ),
        (b'{"type":"request","id":"\xc3(","timestamp":1,"payload":{"method":"x"}}', None),
    ],
)
def test_bytes_that_are_not_utf8_are_a_parse_error_without_a_traceback(
    frame: bytes, rid: str | None
) -> None:
    _, server = pair()
    with capture_logs() as logs:
        assert server.receive_frame(frame, 0.0) == []
    (reply,) = decoded(server)
    assert isinstance(reply, Response) and reply.id == rid
    assert reply.payload.error is not None
    assert reply.payload.error.code == ErrorCode.PARSE_ERROR
    assert "UTF-8" in reply.payload.error.message
    assert [entry["event"] for entry in logs] == ["mesh.invalid_frame"]
    assert not any("exc_info" in entry for entry in logs)


def test_a_flood_of_bad_frames_is_answered_each_time_but_logged_once_per_window() -> None:
    _, server = pair()
    with capture_logs() as logs:
        for i in range(1000):
            server.receive_frame(b"not json %d" % i, 0.001 * i)  # one second of garbage
        answers = server.data_to_send()
        server.receive_frame(b"more garbage", LOG_WINDOW + 1.0)
        server.receive_frame(b"and more", LOG_WINDOW + 1.5)
        server.connection_lost(ConnectionLost("gone"))
    assert len(answers) == 1000
    assert [entry["event"] for entry in logs] == [
        "mesh.invalid_frame",
        "mesh.invalid_frame",
        "mesh.bad_input_unlogged",
    ]
    assert logs[1]["more_since_last_line"] == 999
    assert logs[2]["count"] == 1 and logs[2]["total"] == 1002
    assert all(entry["log_level"] == "warning" for entry in logs)


def test_fail_pending_fails_every_call_now_tells_the_peer_and_keeps_the_link() -> None:
    client, server = pair()
    first = client.send_request("slow", None, now=0.0)
    second = client.send_request("slower", None, now=0.0)
    deliver(client, server)
    events = client.fail_pending("agent 'server' went offline: no heartbeat for 3.0 s")
    assert [e.id for e in events] == [first, second]
    assert all(isinstance(e.error, AgentUnavailable) for e in events)
    assert "no heartbeat for 3.0 s" in str(events[0].error)
    assert "method 'slow'" in str(events[0].error)
    notices = decoded(client)
    assert {n.payload.params["id"] for n in notices} == {first, second}
    assert not client.closed and client.statistics().calls_in_flight == 0
    third = client.send_request("again", None, now=1.0)  # the link is still usable
    assert client.deadline_of(third) is not None


def test_fail_pending_picks_the_calls_of_one_agent_on_a_link_that_carries_many() -> None:
    """A link to another daemon carries calls to many agents: one agent gone fails its own."""
    client, server = pair()
    to_x = client.send_request("mesh/call", {"agent": "x"}, now=0.0)
    to_y = client.send_request("mesh/call", {"agent": "y"}, now=0.0)
    deliver(client, server)
    events = client.fail_pending("agent 'x' went offline", lambda params: params["agent"] == "x")
    assert [e.id for e in events] == [to_x]
    assert isinstance(events[0].error, AgentUnavailable)
    assert [n.payload.params["id"] for n in decoded(client)] == [to_x]
    assert client.statistics().calls_in_flight == 1 and client.deadline_of(to_y) is not None


def test_requests_past_the_links_limit_are_refused_at_once_until_one_is_answered() -> None:
    client, server = pair(SessionConfig(heartbeat_interval=None, max_requests_in_progress=2))
    ids = [client.send_request("subscriptions/listen", {"n": n}, now=0.0) for n in range(3)]
    served = deliver(client, server)
    assert [e.id for e in served] == ids[:2]  # the third never reaches a handler
    (refused,) = calls_done(deliver(server, client))
    assert refused.id == ids[2] and isinstance(refused.error, AgentUnavailable)
    assert refused.error.code == ErrorCode.UNAVAILABLE
    assert "max_requests_in_progress" in str(refused.error)
    assert server.statistics().requests_in_progress == 2
    assert server.send_response(served[0].id, "done")
    again = client.send_request("subscriptions/listen", {"n": 3}, now=0.0)
    assert [e.id for e in deliver(client, server)] == [again]
