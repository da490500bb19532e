"""``python -m mesh.demo.draws``: how often the real model's replies pass the room's checks.

``make demo-llm`` shows one conversation; whether a reply reads as an answer is
then a matter of one seed. This asks the model for the *same* turn many times, at
fixed moments of the demo's conversation (the point the room is on, and the last
message, which the other persona has just said), and counts.

Each draw is asked as the room asks it: the demo's persona and room (its system
prompt, the room's request with its turn prompt, the reply budget, a seed per
draw), cut as the persona cuts it and checked as redraws check it. ``--bare`` asks
the same moments the plainest way instead (the persona's prompt and two short
sentences about whom it talks with, then the last message alone), to tell what
the room's request costs or gains. It prints every draw with its faults, and the
share that passed every check. What the figures said: ``docs/rooms.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final

import anyio
import msgspec

from mesh.agents.persona import PersonaAgent
from mesh.demo._llama import LlamaUnavailable, open_llama_server
from mesh.demo.llm import AGENDA, TOPIC, personas, room_spec
from mesh.providers import ChatMessage
from mesh.rooms import MessageEvent
from mesh.rooms._budget import end_of_reply
from mesh.rooms._draws import reply_faults, unlabelled
from mesh.rooms._model import Room
from mesh.rooms._perspective import build_turn_request, faults_of
from mesh.rooms._policy import TurnPlan

__all__ = ["MOMENTS", "Moment", "main", "run"]


@dataclass(frozen=True)
class Moment:
    """A point of the demo's agenda, and what the other persona has just said on it."""

    speaker: str
    point: int
    last: str


#: One moment for each of the agenda's points, the speaker taking turns.
MOMENTS: Final = (
    Moment(
        "ben",
        0,
        "My pots and soil cost me thirty euros in spring. "
        "By August the basil alone had saved me more than that.",
    ),
    Moment(
        "ben",
        1,
        "My balcony faces south, so my cherry tomatoes get six hours of sun a day. "
        "Three pots fit along the railing.",
    ),
    Moment(
        "ben",
        2,
        "I water my tomatoes and basil every morning before work. "
        "It takes me five minutes with one watering can.",
    ),
    Moment(
        "ada",
        3,
        "Pigeons ate all my neighbour's lettuce in one week. "
        "Who pays for the nets to keep them away?",
    ),
    Moment(
        "ada",
        4,
        "A supermarket tomato costs a few cents. "
        "Why spend a whole summer on one that tastes the same?",
    ),
)

_NAMES: Final = {"ada": "Ada", "ben": "Ben"}
_ROLES: Final = {"ada": "gardener", "ben": "skeptic"}
#: Seeds of one moment's draws start here, each the next: a run replays exactly.
_FIRST_SEED: Final = 11


def demo_room() -> Room:
    """The demo's room as the room engine holds it (its members described as the demo's)."""
    spec = room_spec(20, seed=_FIRST_SEED)
    ids = [m if isinstance(m, str) else m.id for m in spec.members]
    members = [{"id": a, "name": _NAMES[a], "role": _ROLES[a]} for a in ids]
    data = msgspec.to_builtins(spec)
    data.pop("paused", None)  # how a room starts, not what the engine holds
    data.update(id="room-draws", members=members)
    return msgspec.convert(data, Room)


def said(room: Room, moment: Moment) -> list[MessageEvent]:
    """The transcript of the point so far: the other persona's one message."""
    other = next(m for m in room.members if m.id != moment.speaker)
    event = MessageEvent(
        room_id=room.id,
        seq=1,
        agent_id=other.id,
        name=other.name,
        role=other.role,
        turn=1,
        text=moment.last,
    )
    return [event]


async def _draw(
    agent: PersonaAgent,
    system: str,
    messages: Sequence[ChatMessage],
    max_tokens: int | None,
    seed: int,
) -> str:
    completion = await agent.provider.complete(
        messages, system=system, max_tokens=max_tokens, seed=seed
    )
    return end_of_reply(completion.text, cut=completion.finish_reason == "length")


async def run(draws: int, *, bare: bool = False) -> tuple[int, int]:
    """Print every draw at every moment; returns (draws that passed, draws)."""
    room = demo_room()
    passed = asked = 0
    async with open_llama_server() as server:
        agents = {agent.id: agent for agent in personas(server)}
        try:
            for moment in MOMENTS:
                speaker = room.member(moment.speaker)
                transcript = said(room, moment)
                point = AGENDA[moment.point]
                plan = TurnPlan(turn=2, speaker=speaker)
                other = transcript[-1].name
                print(f"\n{speaker.name} answers {other} on {point!r}:\n  {other}: {moment.last}")
                for draw in range(draws):
                    request = build_turn_request(room, transcript, plan, point=point)
                    agent = agents[speaker.id]
                    if bare:
                        system = (
                            f"{agent.persona.system_prompt} You are talking with {other}. "
                            "Reply in one or two short sentences."
                        )
                        messages: Sequence[ChatMessage] = (
                            ChatMessage(role="user", content=moment.last),
                        )
                    else:
                        system = f"{agent.persona.system_prompt}\n\n{request.system}".strip()
                        messages = request.messages
                    seed = _FIRST_SEED + draw
                    text = await _draw(agent, system, messages, request.max_tokens, seed)
                    text = unlabelled(text, [m.name for m in room.members])
                    if bare:
                        faults = reply_faults(
                            text,
                            name=speaker.name,
                            instructions=system,
                            subject=(TOPIC, point),
                            messages=[moment.last],
                            others=[other],
                            answers=moment.last,
                        )
                    else:
                        faults = faults_of(room, transcript, plan, text, point=point)
                    asked += 1
                    passed += not faults
                    mark = "ok " if not faults else "   "
                    why = f"   <{'; '.join(faults)}>" if faults else ""
                    print(f"  {mark}{' '.join(text.split())}{why}")
        finally:
            for agent in agents.values():
                await agent.aclose()
    print(f"\n{passed} of {asked} draws passed every check ({'bare' if bare else 'the room'})")
    return passed, asked


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mesh.demo.draws", description=__doc__)
    parser.add_argument("--draws", type=int, default=8, help="draws at each moment")
    parser.add_argument(
        "--bare", action="store_true", help="ask plainly instead of as the room asks"
    )
    parser.add_argument(
        "--backend", choices=("asyncio", "trio"), default="asyncio", help="anyio's event loop"
    )
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error("--draws must be at least 1")
    try:
        anyio.run(partial(run, args.draws, bare=args.bare), backend=args.backend)
    except LlamaUnavailable as exc:
        print(f"demo draws: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
