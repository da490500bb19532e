"""The room model: specs are validated, events are one JSON tagged union."""

from __future__ import annotations

import msgspec
import pytest

from mesh.rooms import (
    EVENT_TYPES,
    AgentJoinedEvent,
    AgentLeftEvent,
    AnswerEvent,
    ErrorEvent,
    InvalidRoomSpec,
    Member,
    MessageEvent,
    PointEvent,
    QuestionEvent,
    ResumedEvent,
    RoomEvent,
    RoomSpec,
    StoppedEvent,
    StopReason,
    WelcomeEvent,
    decode_event,
    decode_room_spec,
    encode_event,
)

from ._helpers import ROOM, dump, make_room


def test_a_spec_from_json_with_defaults() -> None:
    spec = decode_room_spec(
        b'{"topic": "tabs", "members": ["alice", {"id": "bob", "role": "critic"}]}'
    )
    assert spec.member_ids() == ("alice", "bob")
    assert spec.mode == "chat" and spec.policy == "round-robin"
    assert spec.limits.max_messages_per_agent == 20
    assert spec.rules.convergence_threshold is None
    assert spec.rules.goodbye == "goodbye"
    assert isinstance(spec.members[1], Member) and spec.members[1].role == "critic"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"topic": "t", "members": ["a"]}, "at least two members"),
        ({"topic": "t", "members": ["a", "a"]}, "distinct"),
        ({"topic": "", "members": ["a", "b"]}, "at `$.topic`"),
        ({"topic": "t", "members": ["a", "b", "c"], "mode": "review"}, "exactly two"),
        ({"topic": "t", "members": ["a", "b"], "rules": {"verifier": "c"}}, "not a member"),
        ({"topic": "t", "members": ["a", "b"], "id": "../etc"}, "room id"),
        ({"topic": "t", "members": ["a", "b"], "limits": {"max_turns": 0}}, "$.limits.max_turns"),
        ({"topic": "t", "members": ["a", "b"], "rules": {"convergence_threshold": 2}}, "<= 1"),
        ({"topic": "t", "members": ["a", "b"], "colour": "red"}, "unknown field `colour`"),
        # What every turn's prompt carries is bounded (the topic, by the daemon's setting).
        (
            {"topic": "t", "members": ["a", {"id": "b", "name": "B" * 201}]},
            "members[1].name has 201 characters, at most 200",
        ),
        (
            {"topic": "t", "members": [{"id": "a", "role": "r" * 201}, "b"]},
            "members[0].role has 201",
        ),
        ({"topic": "t", "members": ["a", "b"], "rules": {"goodbye": "g" * 201}}, "rules.goodbye"),
        (
            {"topic": "t", "members": ["a", "b"], "rules": {"verified_prefix": "v" * 201}},
            "rules.verified_prefix",
        ),
    ],
)
def test_bad_specs_say_what_is_wrong(body: dict[str, object], reason: str) -> None:
    with pytest.raises(InvalidRoomSpec, match="invalid room spec") as caught:
        decode_room_spec(body)
    assert reason in str(caught.value)


def test_a_spec_built_in_python_is_checked_too() -> None:
    with pytest.raises(ValueError, match="at least two"):
        RoomSpec(topic="t", members=("solo",))


def test_every_event_round_trips_through_one_tagged_union() -> None:
    room = make_room()
    events: list[RoomEvent] = [
        WelcomeEvent(room_id=ROOM, seq=1, timestamp=5, room=room),
        AgentJoinedEvent(room_id=ROOM, seq=2, agent_id="alice", name="Alice", role="participant"),
        MessageEvent(room_id=ROOM, seq=3, agent_id="alice", turn=1, text="hi", score=0.25),
        AgentLeftEvent(room_id=ROOM, seq=4, agent_id="bob", reason="offline"),
        ErrorEvent(room_id=ROOM, seq=5, message="boom", turn=2, attempt=1, code=-32001),
        ResumedEvent(room_id=ROOM, seq=6, next_turn=2),
        StoppedEvent(room_id=ROOM, seq=7, reason=StopReason.GOODBYE, turn=1, detail="bye"),
        PointEvent(room_id=ROOM, seq=8, index=1, point="the light", turn=1, detail="alike"),
        QuestionEvent(
            room_id=ROOM,
            seq=9,
            agent_id="alice",
            turn=2,
            question="q2-1",
            message="Which colour?",
            schema={"type": "object", "properties": {"colour": {"type": "string"}}},
            deadline=9000,
        ),
        AnswerEvent(
            room_id=ROOM,
            seq=10,
            agent_id="carol",
            turn=2,
            question="q2-1",
            action="accept",
            content={"colour": "blue"},
        ),
    ]
    for event in events:
        assert decode_event(encode_event(event)) == event
    types = [dump(event)["type"] for event in events]
    assert types == [
        "WELCOME",
        "AGENT_JOINED",
        "MESSAGE",
        "AGENT_LEFT",
        "ERROR",
        "RESUMED",
        "STOPPED",
        "POINT",
        "QUESTION",
        "ANSWER",
    ]
    assert set(types) == set(EVENT_TYPES)


def test_events_carry_timestamp_agent_name_and_role() -> None:
    message = dump(
        MessageEvent(
            room_id=ROOM,
            seq=3,
            timestamp=9,
            agent_id="a",
            name="A",
            role="critic",
            turn=4,
            text="x",
        )
    )
    assert message == {
        "type": "MESSAGE",
        "room_id": "r1",
        "seq": 3,
        "timestamp": 9,
        "agent_id": "a",
        "name": "A",
        "role": "critic",
        "turn": 4,
        "text": "x",
        "score": 0.0,
        "step": None,
        "interjection": False,
    }
    welcome = dump(WelcomeEvent(room_id=ROOM, room=make_room()))
    assert (welcome["agent_id"], welcome["name"], welcome["role"]) == ("system", "System", "system")


def test_a_bad_event_names_its_path() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.turn"):
        decode_event(b'{"type": "MESSAGE", "room_id": "r", "turn": "one", "text": "x"}')


def test_resumable_stop_reasons() -> None:
    resumable = {reason for reason in StopReason if reason.resumable}
    assert resumable == {StopReason.PAUSED, StopReason.AGENT_LOST, StopReason.ERROR}


def test_the_public_surface_of_mesh_rooms_leaves_out_internals_and_fixtures() -> None:
    import mesh.rooms

    internals = {"RoomRunner", "RoomStore", "Journal", "RoomState", "next_turn", "before_turn"}
    fixtures = {"demo_chat", "demo_review", "DEMO_TOPIC", "ScriptedSeat"}
    assert not (internals | fixtures) & set(mesh.rooms.__all__)
    assert {"RoomManager", "RoomSpec", "RoomEvent", "TurnRequest", "format_event"} <= set(
        mesh.rooms.__all__
    )
    assert not [name for name in mesh.rooms.__all__ if name.startswith("_")]
