"""The codec: every message type round-trips; garbage never raises anything but DecodeFailure."""

from __future__ import annotations

import os
import uuid
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mesh import ErrorCode
from mesh._errors import error_from_code  # internal: the code -> class table itself
from mesh.protocol import (
    MESH_CODEC,
    DecodeFailure,
    ErrorInfo,
    Heartbeat,
    Message,
    Notification,
    NotificationPayload,
    Request,
    RequestPayload,
    Response,
    ResponsePayload,
    new_request_id,
    salvage_id,
)

ids = st.text(min_size=1, max_size=128)
names = st.text(min_size=1, max_size=256)
stamps = st.integers(min_value=0, max_value=2**53)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
errors = st.builds(ErrorInfo, code=st.integers(-40000, 40000), message=st.text(), data=json_values)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(
        Request,
        id=ids,
        timestamp=stamps,
        payload=st.builds(RequestPayload, method=names, params=json_values),
    ),
    st.builds(
        Response,
        id=ids | st.none(),
        timestamp=stamps,
        payload=st.builds(ResponsePayload, success=st.just(True), result=json_values),
    ),
    st.builds(
        Response,
        id=ids | st.none(),
        timestamp=stamps,
        payload=st.builds(ResponsePayload, success=st.just(False), error=errors),
    ),
    st.builds(
        Notification,
        id=ids,
        timestamp=stamps,
        payload=st.builds(NotificationPayload, method=names, params=json_values),
    ),
    st.builds(Heartbeat, id=ids, timestamp=stamps),
)


@given(messages)
def test_every_message_round_trips(message: Message) -> None:
    assert MESH_CODEC.decode(MESH_CODEC.encode(message)) == message


@given(st.binary(max_size=300))
def test_arbitrary_bytes_fail_cleanly(frame: bytes) -> None:
    try:
        MESH_CODEC.decode(frame)
    except DecodeFailure as failure:
        assert failure.code in (ErrorCode.PARSE_ERROR, ErrorCode.INVALID_REQUEST)
        assert failure.reason


@given(st.dictionaries(st.sampled_from(["type", "id", "timestamp", "payload", "x"]), json_values))
def test_arbitrary_objects_fail_cleanly(obj: dict[str, Any]) -> None:
    import msgspec

    try:
        MESH_CODEC.decode(msgspec.json.encode(obj))
    except DecodeFailure as failure:
        assert failure.code == ErrorCode.INVALID_REQUEST
        assert "$" in failure.reason or "missing" in failure.reason


def test_the_envelope_on_the_wire_is_seed_002s() -> None:
    frame = MESH_CODEC.encode(
        Request(
            id="1",
            timestamp=5,
            payload=RequestPayload(method="tools/call", params={"name": "echo"}),
        )
    )
    assert frame == (
        b'{"type":"request","id":"1","timestamp":5,'
        b'"payload":{"method":"tools/call","params":{"name":"echo"}}}'
    )
    assert MESH_CODEC.encode(Heartbeat(id="h", timestamp=1)) == (
        b'{"type":"heartbeat","id":"h","timestamp":1,"payload":{}}'
    )


def test_salvage_finds_id_and_type_in_a_truncated_frame() -> None:
    assert salvage_id(b'{"type":"request","id":"abc","payload":{"meth') == ("abc", "request")
    assert salvage_id(b"garbage") == (None, None)


def test_error_codes_map_to_exception_classes() -> None:
    for code in ErrorCode:
        exc = error_from_code(code, "m", agent="a")
        assert exc.code == code
        assert str(exc) == "m (agent 'a')"
    unknown = error_from_code(12345, "custom")
    assert type(unknown).__name__ == "RemoteError" and unknown.code == 12345


def test_request_ids_are_canonical_uuid4_and_do_not_repeat() -> None:
    ids = [new_request_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
    for rid in ids[:2_000]:
        parsed = uuid.UUID(rid)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, rid)


def test_a_forked_child_makes_different_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id and leave at once
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    try:
        child = os.read(read, 64).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert child and child != new_request_id()
