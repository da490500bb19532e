"""An agent that asks its caller mid-turn: in a room, the room's people answer it.

``python tests/integration/_asking_agent.py --stdio [--id ID]``: each ``room/turn``
asks (``ctx.elicit``) what colour to paint the shed, with a schema of a required
``colour`` (one of four) and a ``coats`` count that defaults to 2, and speaks
what the answer was. An ask the room refuses fails the turn, as it would any
agent that cannot go on without its answer.
"""

from __future__ import annotations

from typing import Any

from mesh import Agent, RequestContext, run_agent

agent = Agent("asker", name="Asker")

SCHEMA = {
    "type": "object",
    "properties": {
        "colour": {"type": "string", "enum": ["red", "green", "blue", "white"]},
        "coats": {"type": "integer", "default": 2},
    },
    "required": ["colour"],
}


@agent.method("room/persona")
def persona(ctx: RequestContext, params: Any) -> dict[str, str]:
    return {"id": agent.id, "name": "Asker", "role": "painter"}


@agent.method("room/turn")
async def turn(ctx: RequestContext, params: Any) -> dict[str, Any]:
    answer = await ctx.elicit("What colour shall I paint the shed?", SCHEMA)
    if answer.action == "accept" and answer.content is not None:
        text = f"Painting the shed {answer.content['colour']}, {answer.content['coats']} coats."
    elif answer.action == "decline":
        text = "Nobody wants to choose, so the shed stays as it is."
    else:
        text = "The question was cancelled; I will ask another time."
    return {"room_id": params["room_id"], "turn": params["turn"], "text": text}


if __name__ == "__main__":
    run_agent(agent)
