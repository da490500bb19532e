"""Row 7: hypothesis against the session's frame input, ``POST /rpc`` and the WebSocket path.

The codec alone is fuzzed in ``tests/unit/test_protocol.py``. Here the fuzzed frames go
further: into :meth:`Session.receive_frame` (which must never raise, and must answer
every frame that is not a response), and into a live in-process ``open_agent_server``
over HTTP and WebSocket (every body gets a 2xx or 4xx answer with a JSON body, never a
5xx, nothing is logged as an error, and the server keeps serving). The codec is the
oracle for what each frame deserves. Examples are few and bounded: seconds, not minutes.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from mesh import ErrorCode, SessionConfig, open_agent_server
from mesh._rpc.session import (
    CallDone,
    CancelRequested,
    IncomingNotification,
    IncomingRequest,
    Session,
)
from mesh.agents.echo import agent as echo_agent
from mesh.protocol import (
    MESH_CODEC,
    DecodeFailure,
    Heartbeat,
    Notification,
    Request,
    RequestId,
    Response,
    ResponsePayload,
    salvage_id,
)
from tests.faults._helpers import DEEP, ping_frame
from tests.unit.test_protocol import json_values, messages
from transports import HttpServer, WebSocketStream, open_websocket

pytestmark = pytest.mark.anyio

LIMIT = 1024
QUIET_AND_SMALL = SessionConfig(heartbeat_interval=None, max_frame_size=LIMIT)
#: No per-example deadline: on a shared machine a slow example is load, not a bug.
PURE = settings(deadline=None)
#: A live exchange is a millisecond; the examples are few so that both backends take seconds.
LIVE = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# -- frames: garbage, near-misses of the envelope, valid messages, and oversized ones ----------

KINDS = st.sampled_from(["request", "response", "notification", "heartbeat", "nonsense"])
METHODS = st.sampled_from(["ping", "agent/info", "tools/list", "tools/call", "cancelled"])
payloads = st.dictionaries(
    st.sampled_from(["method", "params", "success", "result", "error", "reply", "x"]),
    json_values | METHODS | st.booleans(),
    max_size=4,
)
envelopes = st.dictionaries(
    st.sampled_from(["type", "id", "timestamp", "payload", "x"]),
    json_values | KINDS | payloads | st.integers(0, 2**53),
    max_size=5,
)
near_misses = envelopes.map(msgspec.json.encode)
valid = messages.map(MESH_CODEC.encode)
oversized = st.builds(
    lambda head, size: head[:200] + b" " * size,
    near_misses | valid,
    st.integers(LIMIT + 1, 2 * LIMIT),
)
frames = st.binary(max_size=200) | near_misses | valid | oversized


def _is_utf8(frame: bytes) -> bool:
    try:
        frame.decode()
    except UnicodeDecodeError:
        return False
    return True


#: WebSocket sends text frames, which must be UTF-8 (otherwise: 1007, see
#: test_websocket_invalid_utf8.py).
text_frames = frames.filter(_is_utf8)


@dataclass(frozen=True, slots=True)
class Owed:
    """What a frame deserves: an answer (with this id and, if known, this code), or none."""

    answered: bool
    id: str | None = None
    code: int | None = None


def owed(frame: bytes, limit: int = LIMIT) -> Owed:
    """The codec's verdict on ``frame``, as the answer a peer owes it."""
    if len(frame) > limit:
        request_id, kind = salvage_id(frame)
        return Owed(kind != "response", request_id, ErrorCode.TOO_LARGE)
    try:
        message = MESH_CODEC.decode(frame)
    except DecodeFailure as failure:
        return Owed(failure.kind != "response", failure.request_id, failure.code)
    if isinstance(message, Request):
        return Owed(True, message.id)  # answered by the handler: a result or an error
    return Owed(False)


# -- the session core ---------------------------------------------------------------------------


@PURE
@given(frames)
def test_session_never_raises_and_answers_every_frame_that_is_not_a_response(
    frame: bytes,
) -> None:
    session = Session(now=0.0, config=QUIET_AND_SMALL)
    events = session.receive_frame(frame, 1.0)
    sent = [MESH_CODEC.decode(out) for out in session.data_to_send()]
    due = owed(frame)
    message = None if due.code is not None else MESH_CODEC.decode(frame)
    if isinstance(message, Request):  # the session hands requests to the handler
        [event] = events
        assert isinstance(event, IncomingRequest) and event.id == message.id and sent == []
    elif due.answered:
        assert events == []
        [answer] = sent
        assert isinstance(answer, Response) and answer.id == due.id
        assert answer.payload.error is not None and answer.payload.error.code == due.code
    elif isinstance(message, Heartbeat):  # answered only when it asks to be
        assert events == []
        asked = getattr(message.payload, "reply", False)
        assert [type(out) for out in sent] == ([Heartbeat] if asked else [])
    else:
        assert sent == []
        if isinstance(message, Notification):
            assert all(isinstance(e, IncomingNotification | CancelRequested) for e in events)
        else:
            assert isinstance(message, Response | None) and events == []


CALL_IDS = ["c0", "c1", "c2"]
#: Responses aimed at our calls: valid, invalid, or oversized.
aimed = st.fixed_dictionaries(
    {
        "type": st.just("response"),
        "id": st.sampled_from(CALL_IDS),
        "timestamp": st.integers(0, 10),
        "payload": payloads,
    }
).map(msgspec.json.encode)


@PURE
@given(st.lists(frames | aimed | aimed.map(lambda f: f + b" " * LIMIT), max_size=8))
def test_each_call_ends_exactly_once_whatever_arrives(noise: list[bytes]) -> None:
    session = Session(now=0.0, config=QUIET_AND_SMALL)
    for rid in CALL_IDS:
        session.send_request("tools/call", {"name": "x"}, now=0.0, request_id=RequestId(rid))
    session.data_to_send()
    answers = [
        MESH_CODEC.encode(
            Response(id=rid, timestamp=1, payload=ResponsePayload(success=True, result=rid))
        )
        for rid in CALL_IDS
    ]
    ended = []
    for frame in [*noise, *answers, *noise]:
        ended += [e.id for e in session.receive_frame(frame, 1.0) if isinstance(e, CallDone)]
    assert sorted(ended) == CALL_IDS
    assert session.statistics().calls_in_flight == 0


def test_a_deeply_nested_frame_is_answered_not_raised() -> None:
    session = Session(now=0.0, config=SessionConfig(heartbeat_interval=None))
    assert session.receive_frame(DEEP, 1.0) == []
    [answer] = [MESH_CODEC.decode(out) for out in session.data_to_send()]
    assert isinstance(answer, Response) and answer.id == "deep"
    assert answer.payload.error is not None


# -- a live server, one per backend for the whole module ------------------------------------------


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Module-scoped (the shared one is per test) so that one live server serves every example."""
    return str(request.param)


@dataclass(frozen=True, slots=True)
class Live:
    server: HttpServer
    http: httpx.AsyncClient
    ws: WebSocketStream


@pytest.fixture(scope="module")
async def live(anyio_backend: str) -> AsyncIterator[Live]:
    config = SessionConfig(max_frame_size=LIMIT)
    async with (
        open_agent_server(echo_agent, config=config) as server,
        httpx.AsyncClient(base_url=server.url) as http,
        open_websocket(server.ws_url + "/ws") as ws,
    ):
        yield Live(server, http, ws)


def _no_errors_logged(logs: Sequence[Mapping[str, Any]]) -> None:
    errors = [entry for entry in logs if entry["log_level"] in ("error", "critical")]
    assert not errors, errors


@LIVE
@given(body=frames)
async def test_every_rpc_body_gets_a_json_answer_and_never_a_5xx(live: Live, body: bytes) -> None:
    with capture_logs() as logs, anyio.fail_after(5):
        reply = await live.http.post("/rpc", content=body)
    _no_errors_logged(logs)
    due = owed(body)
    if reply.status_code == 204:
        assert not due.answered and reply.content == b""
        return
    assert reply.headers["content-type"] == "application/json"
    answer = reply.json()
    if due.code == ErrorCode.TOO_LARGE:
        assert reply.status_code == 413 and "exceeds" in answer["error"]["message"]
    elif due.code is not None:
        assert reply.status_code == 400 and answer["id"] == due.id
        assert answer["payload"]["error"]["code"] == due.code
    elif due.answered:
        assert reply.status_code == 200 and answer["id"] == due.id
    else:
        assert reply.status_code == 200 and answer["type"] == "heartbeat"


@LIVE
@given(frame=text_frames)
async def test_every_websocket_frame_gets_its_answer_and_the_link_lives(
    live: Live, frame: bytes
) -> None:
    due = owed(frame)
    barrier = f"barrier-{uuid.uuid4()}"
    with capture_logs() as logs, anyio.fail_after(5):
        await live.ws.send_many([frame, ping_frame(barrier)])
        answers: dict[str | None, dict[str, Any]] = {}
        while barrier not in answers or (due.answered and due.id not in answers):
            reply = msgspec.json.decode(await live.ws.receive())
            if reply["type"] == "heartbeat":
                continue
            assert reply["id"] not in answers, f"answered twice: {reply}"
            answers[reply["id"]] = reply
    _no_errors_logged(logs)
    assert answers.pop(barrier)["payload"]["success"] is True
    if due.answered:
        answer = answers.pop(due.id)
        if due.code is not None:
            assert answer["payload"]["error"]["code"] == due.code
    assert answers == {}, f"unexpected answers: {answers}"


async def test_after_the_fuzzing_the_server_still_serves(live: Live) -> None:
    with anyio.fail_after(5):
        assert (await live.http.get("/health")).json()["status"] == "ok"
        await live.ws.send(ping_frame("after"))
        reply = msgspec.json.decode(await live.ws.receive())
        while reply["type"] == "heartbeat":  # the link's own, due whenever its interval passes
            reply = msgspec.json.decode(await live.ws.receive())
        assert reply["id"] == "after"
