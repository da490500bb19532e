"""``make demo-llm``: two personas talk through a real model, offline, streaming.

Starts llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct on
loopback (:mod:`mesh.demo._llama`), gives two persona agents different system
prompts and the ``openai`` provider pointed at it, and runs a room between them
through a :class:`~mesh.MeshOrchestrator` and a :class:`~mesh.rooms.RoomManager`,
printing each reply as it is streamed, until a rule stops the room; then the
stop reason, and the generation speed the server reported.

The model is tiny (135 M parameters, 4-bit): it rambles and repeats itself, but
it is a real model answering a real chat template, and the whole mesh path
(persona, provider, streaming, the room's rules and store) runs as it would
against any OpenAI-compatible server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from typing import Final

import anyio

from mesh import AgentSpec, MeshOrchestrator, local_connector
from mesh._logging import configure_logging
from mesh.agents.persona import PersonaAgent
from mesh.demo._llama import LlamaServer, LlamaUnavailable, open_llama_server
from mesh.manifests._types import Persona
from mesh.providers import ProviderConfig
from mesh.rooms import (
    DeltaEvent,
    ExitRules,
    Limits,
    MessageEvent,
    RoomManager,
    RoomSpec,
    StoppedEvent,
)

__all__ = ["TOPIC", "main", "personas", "run_demo"]

TOPIC: Final = "Is it worth growing your own vegetables on a small city balcony?"

_PROMPTS: Final = {
    ("ada", "Ada", "gardener"): (
        "You are Ada, a cheerful city gardener who grows tomatoes and herbs on her balcony. "
        "You are enthusiastic and practical. Answer in two or three short sentences."
    ),
    ("ben", "Ben", "skeptic"): (
        "You are Ben, a skeptical accountant who thinks about cost and time. You ask "
        "pointed questions. Answer in two or three short sentences."
    ),
}


def personas(server: LlamaServer, *, max_tokens: int = 60) -> list[PersonaAgent]:
    """Ada and Ben: the same model, different system prompts."""
    config = ProviderConfig(
        provider="openai",
        model=server.model,
        base_url=server.base_url,
        api_key_env="",  # a local server wants no key
        temperature=0.8,
        max_tokens=max_tokens,
        timeout=120.0,
    )
    return [
        PersonaAgent(
            agent_id,
            Persona(system_prompt=prompt, provider=config, role=role, awareness="basic"),
            name=name,
        )
        for (agent_id, name, role), prompt in _PROMPTS.items()
    ]


def room_spec(max_turns: int) -> RoomSpec:
    return RoomSpec(
        topic=TOPIC,
        members=("ada", "ben"),
        # A small context keeps the prompt short for a 2048-token window.
        limits=Limits(max_turns=max_turns, context_messages=4, turn_timeout=120, retry_delay=1),
        # A 135 M model says "goodbye" at random and soon quotes its partner word for word
        # (NO_IMPROVEMENT): the turn limit ends this room, and the scores show the echo.
        rules=ExitRules(goodbye=None, no_improvement=False),
    )


async def run_demo(max_turns: int = 12) -> int:
    """Run the room, printing it live; returns the number of messages."""
    print("starting llama.cpp's server with SmolLM2-135M-Instruct (Q4_1) on loopback ...")
    async with open_llama_server() as server:
        print(f"  {server.base_url} serves {server.model!r}\n")
        agents = personas(server)
        specs = [AgentSpec(agent.id, local_connector(agent)) for agent in agents]
        with tempfile.TemporaryDirectory() as data_dir:
            async with (
                MeshOrchestrator(specs) as mesh,
                RoomManager.for_orchestrator(mesh, data_dir) as rooms,
            ):
                room = await rooms.create(room_spec(max_turns))
                print(f"room {room.id}: {TOPIC!r}")
                print("  " + ", ".join(f"{m.name} ({m.role})" for m in room.room.members) + "\n")
                messages = await _print_live(rooms, room.id)
            for agent in agents:
                await agent.aclose()
        rates = server.eval_rates
        if rates:
            print(
                f"\nthe server reported {statistics.mean(rates):.1f} tokens/s on average "
                f"({min(rates):.1f} to {max(rates):.1f}) over {len(rates)} replies"
            )
    return messages


async def _print_live(rooms: RoomManager, room_id: str) -> int:
    messages = 0
    async with rooms.subscribe_live(room_id) as events:
        async for event in events:
            if isinstance(event, DeltaEvent):
                if not event.text:
                    print(f"{event.name} ({event.role}), turn {event.turn}: ", end="", flush=True)
                print(event.text.replace("\n", " "), end="", flush=True)
            elif isinstance(event, MessageEvent):
                messages += 1
                print(f"\n  [score {event.score:.2f}]\n", flush=True)
            elif isinstance(event, StoppedEvent):
                print(f"stopped after {messages} messages: {event.reason} ({event.detail})")
            elif event.__struct_config__.tag == "ERROR":
                print(f"\n  error: {getattr(event, 'message', '')}", flush=True)
    return messages


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mesh.demo.llm", description=__doc__)
    parser.add_argument("--turns", type=int, default=12, help="the room's turn limit")
    args = parser.parse_args(argv)
    configure_logging(level="warning")  # the conversation is the output
    try:
        anyio.run(run_demo, args.turns)
    except LlamaUnavailable as exc:
        print(f"demo-llm: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
