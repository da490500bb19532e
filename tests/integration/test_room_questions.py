"""A member asks the room's people mid-turn, through the real daemon: an agent process
that calls ``ctx.elicit`` in its ``room/turn``, and a person joined over the people's
routes (and the ``mesh room answer`` command) who answers, declines, or lets the turn's
deadline pass; every refusal leaves the room running.

The tests on one daemon share it per backend, with its asker and Alice: the asker keeps
nothing between turns, and each test runs rooms of its own ids.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh.rooms import (
    AnswerEvent,
    ErrorEvent,
    MessageEvent,
    QuestionEvent,
    RoomEvent,
    StoppedEvent,
    decode_event,
)
from mesh.testing import Daemon, spawn_daemon, spawn_nats_server
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.cluster._history import open_daemons
from tests.cluster._history import persona_manifest as persona_manifest_text

from ._daemon import persona_manifest

pytestmark = pytest.mark.anyio

ASKER = Path(__file__).with_name("_asking_agent.py")
GUARD = 60.0


def _manifests(tmp_path: Path) -> tuple[Path, list[str]]:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    args = [str(ASKER), "--stdio"]
    (manifests / "asker.toml").write_text(
        f'id = "asker"\ncapabilities = ["chat"]\n[transport]\ntype = "stdio"\n'
        f"command = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n"
    )
    persona_manifest(manifests, "alice", "Alice", ["{speaker} said: {last}"], 0.0)
    return manifests, ["--data-dir", str(tmp_path / "data")]


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    """The asker and Alice on one daemon, for the tests that each run rooms of their own
    ids: the daemon and its two agents are most of what each would cost. The question
    answered through another daemon of a cluster starts its own."""
    manifests, args = _manifests(tmp_path_factory.mktemp("questions"))
    async with spawn_daemon(manifests, extra_args=args) as shared:
        await shared.wait_online("asker", "alice")
        yield shared


async def _open_room(
    daemon: Daemon, room_id: str, *, people: tuple[str, ...] = ("Carol",), **limits: Any
) -> None:
    """A room whose first turn is the asker's, with ``people`` present before it starts."""
    spec = {
        "id": room_id,
        "topic": "The shed",
        "members": ["asker", "alice"],
        "paused": True,
        "limits": {"max_turns": 1, **limits},
        "rules": {"max_failures": 1},
    }
    async with daemon.client() as http:
        created = await http.post("/rooms", json=spec)
        assert created.status_code == 201, created.text
        for name in people:
            joined = await http.post(f"/rooms/{room_id}/join", json={"name": name})
            assert joined.status_code == 200, joined.text
        assert (await http.post(f"/rooms/{room_id}/resume")).status_code == 200


async def _until(
    watch: Any, kind: type[RoomEvent], seen: list[RoomEvent], *, who: str | None = None
) -> Any:
    """Events as an observer gets them live, up to the first of ``kind`` (by ``who``)."""
    with anyio.fail_after(GUARD):
        while True:
            event = decode_event(await watch.receive())
            seen.append(event)
            if isinstance(event, kind) and who in (None, getattr(event, "agent_id", None)):
                return event


async def test_a_person_answers_the_agents_question_and_its_turn_uses_the_answer(
    daemon: Daemon,
) -> None:
    await _open_room(daemon, "shed", people=("Carol", "Dave"))
    seen: list[RoomEvent] = []
    async with daemon.open_events("/rooms/shed/events") as watch, daemon.client() as http:
        asked: QuestionEvent = await _until(watch, QuestionEvent, seen)
        assert (asked.agent_id, asked.turn, asked.question) == ("asker", 1, "q1-1")
        assert asked.message == "What colour shall I paint the shed?"
        assert asked.schema["required"] == ["colour"] and asked.deadline is not None

        async def answer(member: str, question: str, **body: Any) -> Any:
            body = {"member": member, "question": question, **body}
            return await http.post("/rooms/shed/answer", json=body)

        # Refusals, each naming its rule; the question stays open through them.
        stranger = await answer("zed", "q1-1", action="accept", content={"colour": "red"})
        assert stranger.status_code == 400 and "not a person" in stranger.text
        agent = await answer("alice", "q1-1", action="decline")
        assert agent.status_code == 400 and "not a person" in agent.text
        assert (await http.post("/rooms/shed/leave", json={"member": "dave"})).status_code == 204
        away = await answer("dave", "q1-1", action="accept", content={"colour": "red"})
        assert away.status_code == 409 and "not present" in away.text
        misfit = await answer("carol", "q1-1", action="accept", content={"colour": "purple"})
        assert misfit.status_code == 400 and "'purple' is none of" in misfit.text
        unknown = await answer("carol", "q9-9", action="decline")
        assert unknown.status_code == 409 and "no open question 'q9-9'" in unknown.text
        maybe = await answer("carol", "q1-1", action="maybe")
        assert maybe.status_code == 400 and "accept, decline, cancel" in maybe.text

        given = await answer("carol", "q1-1", action="accept", content={"colour": "blue"})
        assert given.status_code == 200, given.text
        assert given.json() == {"status": "answered", "question": "q1-1", "member": "carol"}
        again = await answer("carol", "q1-1", action="accept", content={"colour": "red"})
        assert again.status_code == 409 and "answered already" in again.text
        said: MessageEvent = await _until(watch, MessageEvent, seen)
        await _until(watch, StoppedEvent, seen)
        shown = (await http.get("/rooms/shed")).json()["room"]
    # Stopped and watched by nobody now, the room is let go of (its log keeps it): a late
    # answer is still told how the question ended, from the log.
    async with daemon.client() as http:
        body = {"member": "carol", "question": "q1-1", "action": "decline"}
        late = await http.post("/rooms/shed/answer", json=body)
    assert late.status_code == 409
    assert "'q1-1' was answered already (accept by 'carol')" in late.text, late.text
    assert said.text == "Painting the shed blue, 2 coats."  # the schema's default filled in
    answered = [e for e in seen if isinstance(e, AnswerEvent)]
    assert [(a.agent_id, a.action, a.content) for a in answered] == [
        ("carol", "accept", {"colour": "blue", "coats": 2})
    ]
    assert shown["status"] == "stopped" and shown["stop_reason"] == "MAX_TURNS"
    assert not [e for e in seen if isinstance(e, ErrorEvent)]


async def test_a_question_declined_from_the_command_line_and_one_in_a_room_of_nobody(
    daemon: Daemon,
) -> None:
    await _open_room(daemon, "empty", people=())
    seen: list[RoomEvent] = []
    with anyio.fail_after(GUARD):  # refused at once: never the turn's 120 s
        async with daemon.open_events("/rooms/empty/events") as watch:
            failed: ErrorEvent = await _until(watch, ErrorEvent, seen)
    assert "has no person present to answer a question" in failed.message
    assert not [e for e in seen if isinstance(e, QuestionEvent)]

    await _open_room(daemon, "decline")
    seen = []
    async with daemon.open_events("/rooms/decline/events") as watch:
        asked: QuestionEvent = await _until(watch, QuestionEvent, seen)
        command = [sys.executable, "-m", "mesh.cli", "room", "answer", "decline"]
        command += [asked.question, "--as", "Carol", "--decline"]
        done = await anyio.run_process(command, env=daemon.env(), check=False)
        assert done.returncode == 0, done.stderr.decode()
        assert b"answered question q1-1 (decline)" in done.stdout
        said: MessageEvent = await _until(watch, MessageEvent, seen)
    assert said.text == "Nobody wants to choose, so the shed stays as it is."
    answered = [e for e in seen if isinstance(e, AnswerEvent)]
    assert [(a.agent_id, a.action, a.content) for a in answered] == [("carol", "decline", None)]


async def test_a_question_nobody_answers_ends_with_the_turn_and_is_withdrawn(
    daemon: Daemon,
) -> None:
    await _open_room(daemon, "late", turn_timeout=2.0)
    seen: list[RoomEvent] = []
    async with daemon.open_events("/rooms/late/events") as watch, daemon.client() as http:
        asked: QuestionEvent = await _until(watch, QuestionEvent, seen)
        withdrawn: AnswerEvent = await _until(watch, AnswerEvent, seen)
        failed: ErrorEvent = await _until(watch, ErrorEvent, seen)
        stopped: StoppedEvent = await _until(watch, StoppedEvent, seen)
        body = {"member": "carol", "question": asked.question, "action": "decline"}
        late = await http.post("/rooms/late/answer", json=body)
    assert (withdrawn.question, withdrawn.action) == (asked.question, "withdrawn")
    assert withdrawn.reason  # the turn's end, or the asker giving up as it ended
    assert f"its question {asked.question} to the room's people" in failed.message
    assert str(stopped.reason) == "ERROR"
    assert late.status_code == 409, late.text


async def test_a_person_answers_from_the_join_prompt(daemon: Daemon) -> None:
    # Carol is present before the first turn (a paused room's watch ends, and so does
    # the join command on it); the command then takes her seat again, mid-question.
    await _open_room(daemon, "prompt")
    command = [sys.executable, "-m", "mesh.cli", "room", "join", "prompt", "--as", "Carol"]
    async with await anyio.open_process(command, env=daemon.env()) as cli:
        assert cli.stdin is not None and cli.stdout is not None
        out: list[str] = []
        await _read_until(cli.stdout, "-- question q1-1: answer with /answer", out)
        await cli.stdin.send(b"/answer q1-1 colour=red coats=three\n")  # not an integer
        await cli.stdin.send(b"/answer q1-1 colour=red coats=3\n")
        await _read_until(cli.stdout, "Painting the shed red, 3 coats.", out)
        await cli.stdin.aclose()
        with anyio.fail_after(GUARD):
            await cli.wait()
    printed = "".join(out)
    assert "Asker (painter) asks the room's people (question q1-1, turn 1)" in printed
    assert "Carol (person) answered question q1-1, accept: colour=red, coats=3" in printed


async def _read_until(stream: Any, wanted: str, seen: list[str]) -> None:
    with anyio.fail_after(GUARD):
        while wanted not in "".join(seen):
            seen.append((await stream.receive()).decode(errors="replace"))


async def test_a_person_answers_through_a_daemon_that_does_not_run_the_room(
    tmp_path: Path,
) -> None:
    """Daemon a runs the room and its asker; Carol joins and answers through daemon b,
    which hands her answer to a, where the question is open. (A paused room has no
    holder to hand a join to, so the room runs from the start: Alice's first turn takes
    long enough for Carol's join to be recorded before the asker's turn.)"""
    asker = (_manifests(tmp_path)[0] / "asker.toml").read_text()
    alice_path = tmp_path / "cluster" / "a" / "manifests" / "alice.toml"
    alice = persona_manifest_text(alice_path, "alice", delay=5.0)
    async with (
        spawn_nats_server() as nats,
        open_daemons(
            tmp_path / "cluster",
            {"a": nats.url, "b": nats.url},
            files={"a": {"asker.toml": asker, "alice.toml": alice}},
        ) as daemons,
    ):
        a, b = daemons["a"], daemons["b"]
        await b.wait_online("asker", "alice")
        spec: dict[str, Any] = {"id": "shed", "topic": "The shed", "members": ["alice", "asker"]}
        spec.update(limits={"max_turns": 2}, rules={"max_failures": 1})
        seen: list[RoomEvent] = []
        async with a.client() as on_a, b.client() as on_b:
            assert (await on_a.post("/rooms", json=spec)).status_code == 201
            async with b.open_events("/rooms/shed/events") as watch:
                joined = await on_b.post("/rooms/shed/join", json={"name": "Carol"})
                assert joined.status_code == 200, joined.text
                asked: QuestionEvent = await _until(watch, QuestionEvent, seen)

                async def answer(**body: Any) -> Any:
                    body = {"member": "carol", "question": asked.question, **body}
                    return await on_b.post("/rooms/shed/answer", json=body)

                # the holder's refusal comes back as its own: a misfit is 400, not 409
                misfit = await answer(action="accept", content={"colour": "purple"})
                assert misfit.status_code == 400 and "'purple' is none of" in misfit.text
                given = await answer(action="accept", content={"colour": "green"})
                assert given.status_code == 200, given.text
                again = await answer(action="decline")
                # Refused whichever way the race goes: by a, whose room still runs and
                # knows the question's end, or by b, once a has stopped the room.
                assert again.status_code == 409, again.text
                assert "answered already" in again.text or "no turn in flight" in again.text
                said: MessageEvent = await _until(watch, MessageEvent, seen, who="asker")
    assert said.text == "Painting the shed green, 2 coats."
    answered = [e for e in seen if isinstance(e, AnswerEvent)]
    assert [(e.agent_id, e.action) for e in answered] == [("carol", "accept")]
