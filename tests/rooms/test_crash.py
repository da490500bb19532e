"""A process running a room is SIGKILLed mid-turn; a new manager resumes it, every turn once."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from textwrap import dedent

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from mesh.demo.fixtures import demo_chat
from mesh.rooms import ResumedEvent, RoomManager, StopReason
from mesh.testing import SPAWN_TIMEOUT

from ._helpers import GUARD, assert_log_and_db_agree, direct_speaker, read_log, seat_agent

pytestmark = pytest.mark.anyio

CHILD = dedent(
    """
    import sys

    import anyio

    from mesh.agents.persona import PersonaAgent
    from mesh.demo.fixtures import DEMO_TOPIC, demo_chat
    from mesh.rooms import Member, RoomManager, RoomSpec

    async def main(data_dir: str) -> None:
        seats = demo_chat()
        agents = {s.id: PersonaAgent(s.id, s.persona, name=s.name) for s in seats}

        async def speak(agent_id, request):
            print(f"asked {request.turn}", flush=True)
            if request.turn == 6:
                await anyio.sleep_forever()  # the process is killed while waiting here
            return await agents[agent_id].take_turn(request)

        members = tuple(Member(id=s.id, name=s.name, role=s.persona.role) for s in seats)
        async with RoomManager(data_dir, speak=speak) as rooms:
            await rooms.create(RoomSpec(id="killed", topic=DEMO_TOPIC, members=members))
            await anyio.sleep_forever()

    anyio.run(main, sys.argv[1])
    """
)


async def run_until_asked(script: Path, data_dir: Path, turn: int) -> None:
    """Start the child, wait until it asks for ``turn``, SIGKILL it."""
    command = [sys.executable, str(script), str(data_dir)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    async with await anyio.open_process(command, env=env) as process:
        assert process.stdout is not None
        seen = ""
        try:  # a Python process starting, then six turns: a loaded machine takes its time
            with anyio.fail_after(SPAWN_TIMEOUT):
                async for chunk in TextReceiveStream(process.stdout):
                    seen += chunk
                    if f"asked {turn}\n" in seen:
                        break
        finally:  # asked, or not in time: either way it goes, or leaving the block would wait on it
            os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(GUARD):
            assert await process.wait() == -signal.SIGKILL


async def test_sigkill_mid_room_then_resume_records_every_turn_once(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    data_dir = tmp_path / "data"
    await run_until_asked(script, data_dir, turn=6)

    speak = direct_speaker(seat_agent(seat) for seat in demo_chat())
    async with RoomManager(data_dir, speak=speak) as rooms:
        with anyio.fail_after(GUARD):
            snapshot = await rooms.wait("killed")
        transcript = await rooms.transcript("killed")
    assert snapshot.stop_reason is StopReason.GOODBYE
    assert [m.turn for m in transcript] == list(range(1, 13))
    assert transcript[1].text.startswith("Boundaries inside a monolith erode, Alice.")
    assert assert_log_and_db_agree(data_dir, "killed") == transcript
    resumed = [
        e for e in read_log(data_dir / "rooms" / "killed.jsonl") if isinstance(e, ResumedEvent)
    ]
    assert [e.next_turn for e in resumed] == [6]
