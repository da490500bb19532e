"""``make demo-llm``: two personas talk through a real model, offline, streaming.

Starts llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct on
loopback (:mod:`mesh.demo._llama`), gives two persona agents different system
prompts and the ``openai`` provider pointed at it, and runs a room between them
through a :class:`~mesh.MeshOrchestrator` and a :class:`~mesh.rooms.RoomManager`,
printing each reply as it is streamed, until a rule stops the room; then the
stop reason, the time to each reply's first word, and the generation speed the
server reported.

The model is tiny (135 M parameters, 4-bit), so the room's choices carry it:
a reply budget that ends each reply at a sentence, a context budget (the
prompt, and the wait for the first word, stay the same size every turn), an agenda
of five concrete points under the topic (the turn prompt names the current one, quotes the last
speaker and restates the topic), every exit rule on, with a loop guard that moves the room to
the next point when the two go round on one (and ends it on the last), redraws (a reply
that recites its prompt or repeats a message is asked for again), and a seed per run:
printed, and ``--seed`` replays a run.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Final

import anyio

from mesh import EMBEDDER, AgentSpec, MeshOrchestrator, local_connector
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
    PointEvent,
    RoomManager,
    RoomSpec,
    StoppedEvent,
)

__all__ = ["AGENDA", "TOPIC", "main", "personas", "run_demo"]

TOPIC: Final = "Is it worth growing your own vegetables on a small city balcony?"
#: What the two get through, one point at a time: a small model given only the topic
#: says its piece in a few turns and then goes round; a concrete point gives it
#: something new to answer.
AGENDA: Final = (
    "What do pots, soil and seeds cost, against what the vegetables save?",
    "Is there enough sun and space on a small balcony?",
    "How much time does the daily watering take?",
    "What about pests: pigeons, aphids and snails?",
    "Do vegetables from a balcony really taste better?",
)
#: Messages on one point before the room moves on (the two take turns opening a point):
#: the loop guard moves it on sooner when they go round. After the last point the room
#: ends, inside the turn limit (20): the agenda done is the reason it stops.
TURNS_PER_POINT: Final = 3

_PROMPTS: Final = {
    ("ada", "Ada", "gardener"): (
        "You are Ada, a gardener. You say a balcony vegetable garden is worth it. You grow "
        "cherry tomatoes, basil and lettuce in pots on your small city balcony. Answer Ben "
        "with one example from your own balcony. Speak plainly, in two short sentences."
    ),
    ("ben", "Ben", "skeptic"): (
        "You are Ben, an accountant. You say a balcony vegetable garden is not worth it: "
        "pots and soil cost money, watering takes time, pigeons eat the plants. Never agree "
        "with Ada: name one cost she forgot and ask her one question. Speak plainly, in two "
        "short sentences."
    ),
}

#: Sampling for a small model: a little randomness, and a penalty on tokens it has
#: already used in the reply it is writing (llama.cpp counts only those, not the
#: earlier turns), so it does not fall into saying one phrase again and again.
TEMPERATURE: Final = 0.7
FREQUENCY_PENALTY: Final = 0.6
#: A reply's budget (tokens): two short sentences, with the prompt asking for fewer
#: words so the model ends on its own before the cut. Longer budgets only gave the
#: model room to ramble, and each token costs the next turn's wait on a busy machine.
REPLY_TOKENS: Final = 50
#: How much transcript each persona is shown (tokens, estimated): the last few replies
#: and a line summing up the rest, well inside the 2048-token window.
CONTEXT_TOKENS: Final = 200
#: A reply that recites its prompt, addresses itself, talks about its reply or repeats a
#: message is asked for again, up to this many times (the room keeps the best draw).
REDRAWS: Final = 8
#: The loop guard: a reply this alike to its speaker's last one, or a score this high
#: twice running, ends the room with NO_IMPROVEMENT. Two replies of about the same
#: length that share a third of their words already score about 0.6 (the length ratio
#: is 0.4 of the score, and both restate the topic), so 0.7 waits for a real echo.
REPETITION: Final = 0.7


def personas(server: LlamaServer, *, max_tokens: int = 120) -> list[PersonaAgent]:
    """Ada and Ben: the same model, different system prompts."""
    config = ProviderConfig(
        provider="openai",
        model=server.model,
        base_url=server.base_url,
        api_key_env="",  # a local server wants no key
        temperature=TEMPERATURE,
        frequency_penalty=FREQUENCY_PENALTY,
        max_tokens=max_tokens,
        timeout=300.0,
    )
    return [
        PersonaAgent(
            agent_id,
            Persona(system_prompt=prompt, provider=config, role=role, awareness="basic"),
            name=name,
        )
        for (agent_id, name, role), prompt in _PROMPTS.items()
    ]


def room_spec(
    max_turns: int,
    *,
    seed: int | None = None,
    reply_tokens: int | None = REPLY_TOKENS,
    context_tokens: int | None = CONTEXT_TOKENS,
) -> RoomSpec:
    """The demo's room: its budgets, and every exit rule on (goodbye, repeats, the guard)."""
    return RoomSpec(
        topic=TOPIC,
        members=("ada", "ben"),
        limits=Limits(
            max_turns=max_turns,
            reply_tokens=reply_tokens,
            context_tokens=context_tokens,
            turns_per_point=TURNS_PER_POINT,
            turn_timeout=300,
            retry_delay=1,
            redraws=REDRAWS,
        ),
        rules=ExitRules(repetition_threshold=REPETITION),
        seed=seed,
        agenda=AGENDA,
        turn_prompt="message",
    )


async def run_demo(
    max_turns: int = 20,
    seed: int | None = None,
    *,
    reply_tokens: int | None = REPLY_TOKENS,
    context_tokens: int | None = CONTEXT_TOKENS,
) -> int:
    """Run the room, printing it live; returns the number of messages."""
    seed = secrets.randbelow(2**31) if seed is None else seed
    print("starting llama.cpp's server with SmolLM2-135M-Instruct (Q4_1) on loopback ...")
    async with open_llama_server() as server:
        print(f"  {server.base_url} serves {server.model!r}\n")
        agents = personas(server)
        specs = [AgentSpec(agent.id, local_connector(agent)) for agent in agents]
        spec = room_spec(
            max_turns, seed=seed, reply_tokens=reply_tokens, context_tokens=context_tokens
        )
        with tempfile.TemporaryDirectory() as data_dir:
            async with (
                MeshOrchestrator(specs) as mesh,
                RoomManager.for_orchestrator(mesh, data_dir, creator=EMBEDDER) as rooms,
            ):
                room = await rooms.create(spec)
                print(f"room {room.id}: {TOPIC!r}  (seed {seed}: --seed {seed} replays it)")
                print("  " + ", ".join(f"{m.name} ({m.role})" for m in room.room.members))
                print(f"  {_settings(spec)}\n")
                messages, waits = await _print_live(rooms, room.id)
            for agent in agents:
                await agent.aclose()
        if waits:
            shown = ", ".join(f"{wait:.1f}" for wait in waits)
            print(f"\ntime to the first word of each reply (s): {shown}")
        rates = server.eval_rates
        if rates:
            print(
                f"the server reported {statistics.mean(rates):.1f} tokens/s on average "
                f"({min(rates):.1f} to {max(rates):.1f}) over {len(rates)} replies"
            )
    return messages


def _settings(spec: RoomSpec) -> str:
    limits, rules = spec.limits, spec.rules
    reply = f"{limits.reply_tokens} tokens a reply" if limits.reply_tokens else "no reply budget"
    context = (
        f"{limits.context_tokens} tokens of context"
        if limits.context_tokens
        else "the whole transcript as context"
    )
    return (
        f"{reply}, {context}; {len(spec.agenda)} points, {limits.turns_per_point} turns each "
        f"at most, the next one when the loop guard sees {rules.repetition_threshold} alike; "
        f"a faulty reply drawn again up to {limits.redraws} times; "
        f"ends at {limits.max_turns} turns, on goodbye, on a repeat, or on the last point"
    )


async def _print_live(rooms: RoomManager, room_id: str) -> tuple[int, list[float]]:
    """Print the room as it streams; the messages, and each reply's wait for its first word."""
    messages, waits, streamed = 0, [], ""
    began: float | None = None
    async with rooms.subscribe_live(room_id) as events:
        async for event in events:
            if isinstance(event, DeltaEvent):
                if not event.text:
                    if event.redraw:  # the room set the reply above aside and asks again
                        print(f"\n  [set aside: {event.redraw}]\n")
                    began, streamed = time.perf_counter(), ""
                    print(f"{event.name} ({event.role}), turn {event.turn}: ", end="", flush=True)
                elif began is not None:
                    waits.append(time.perf_counter() - began)
                    began = None
                streamed += event.text
                print(event.text.replace("\n", " "), end="", flush=True)
            elif isinstance(event, MessageEvent):
                messages += 1
                if event.text != streamed.strip():  # the budget cut it: what the room keeps
                    print(f"\n  [kept: {' '.join(event.text.split())}]", end="")
                print(f"\n  [score {event.score:.2f}]\n", flush=True)
            elif isinstance(event, PointEvent):
                print(f"--- point {event.index + 1} of {len(AGENDA)}: {event.point}", end="")
                print(f"  ({event.detail})\n" if event.detail else "\n", flush=True)
            elif isinstance(event, StoppedEvent):
                print(f"stopped after {messages} messages: {event.reason} ({event.detail})")
            elif event.__struct_config__.tag == "ERROR":
                print(f"\n  error: {getattr(event, 'message', '')}", flush=True)
    return messages, waits


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mesh.demo.llm", description=__doc__)
    parser.add_argument("--turns", type=int, default=20, help="the room's turn limit")
    parser.add_argument("--seed", type=int, help="replay a run (default: a new seed, printed)")
    parser.add_argument(
        "--reply-tokens", type=int, default=REPLY_TOKENS, help="a reply's budget (0: none)"
    )
    parser.add_argument(
        "--context-tokens",
        type=int,
        default=CONTEXT_TOKENS,
        help="the transcript each persona is shown, in tokens (0: all of it)",
    )
    parser.add_argument(
        "--backend", choices=("asyncio", "trio"), default="asyncio", help="anyio's event loop"
    )
    args = parser.parse_args(argv)
    configure_logging(level="warning")  # the conversation is the output
    run = partial(
        run_demo,
        args.turns,
        args.seed,
        reply_tokens=args.reply_tokens or None,
        context_tokens=args.context_tokens or None,
    )
    try:
        terminated = anyio.run(_until_terminated, run, backend=args.backend)
    except LlamaUnavailable as exc:
        print(f"demo-llm: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    if terminated:
        raise SystemExit(128 + signal.SIGTERM)


async def _until_terminated(run: Callable[[], Awaitable[object]]) -> bool:
    """``run()``, cancelled by SIGTERM (True then) so that llama.cpp's server is stopped too.

    Without this a ``kill`` or a ``timeout`` ends the demo at once and leaves the server,
    its child, running with no one to stop it.
    """
    terminated = False
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            nonlocal terminated
            with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    terminated = True
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(watch)
        await run()
        tg.cancel_scope.cancel()
    return terminated


if __name__ == "__main__":
    main()
