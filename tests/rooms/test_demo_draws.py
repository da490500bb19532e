"""``python -m mesh.demo.draws`` asks each moment as the demo's room would. Pure: no model."""

from __future__ import annotations

from mesh.demo.draws import MOMENTS, demo_room, said
from mesh.demo.llm import AGENDA, TOPIC
from mesh.rooms._perspective import build_turn_request, faults_of
from mesh.rooms._policy import TurnPlan


def test_each_moment_is_the_demos_turn_answering_the_other_on_its_point() -> None:
    room = demo_room()
    assert room.topic == TOPIC and room.agenda == AGENDA and room.limits.redraws == 8
    assert [moment.point for moment in MOMENTS] == list(range(len(AGENDA)))
    for moment in MOMENTS:
        speaker = room.member(moment.speaker)
        transcript = said(room, moment)
        assert [m.agent_id for m in transcript] != [speaker.id]  # the other spoke last
        point = AGENDA[moment.point]
        request = build_turn_request(
            room, transcript, TurnPlan(turn=2, speaker=speaker), point=point
        )
        last = request.messages[-1]
        # The room's own turn prompt closes the message it answers, naming the point.
        assert last.content.startswith(moment.last)
        assert point in last.content and f"Answer {transcript[-1].name}" in last.content
        assert request.max_tokens == room.limits.reply_tokens
        plan = TurnPlan(turn=2, speaker=speaker)
        # The checks are the room's: the point asked back is set aside.
        assert "repeats the question" in faults_of(room, transcript, plan, point, point=point)
