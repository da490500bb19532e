"""The persona agent: one persona, its own model, any number of rooms at once.

It serves ``room/turn`` (take a turn: the room's perspective in, the model's
reply out) and ``room/persona`` (who it is). Run it as a program::

    python -m mesh.agents.persona --name Bob --role critic --provider ollama --model llama3 \\
        --connect ws://127.0.0.1:8700/ws --token-env BOB_TOKEN

``--provider scripted --script-file F`` answers from a file (replies separated
by lines holding only ``---``); ``--manifest F`` takes id, name and persona from
an agent manifest. The transport flags are :func:`mesh.run_agent`'s (``--stdio``,
the default; ``--http HOST:PORT``; ``--connect URL --token-env VAR``; ``--id``).

**Idempotent turns**. Per room (its id and ``epoch``: a room made again under
an old id is another room) it remembers the last turn it was asked and its
answer. A request for a later turn is answered by the model; a duplicate of the
answered turn gets that answer again (``replayed``: the model
is not asked twice, so a reply lost in transit is not lost for good); a request
for an earlier turn, or a duplicate that arrives while the first is still being
answered, is ``dropped``. A turn whose first attempt failed or was cancelled
is answered afresh: it was never spoken. A later ``draw`` of the answered turn
(the room set the reply aside: ``Limits.redraws``) is answered afresh too.

**Budgets.** The room's reply budget (``max_tokens`` of the request; the
persona's own ``max_tokens`` when smaller) and its turn's ``seed`` go to the
model; a reply the budget cut ends at its last full sentence, or with ``…``
when that would lose most of it (:func:`mesh.rooms._budget.end_of_reply`).

**Streaming.** The model's reply is streamed where its API allows, and each
piece goes back to the room as a ``progress`` notification of the ``room/turn``
call (the piece in ``message``, the characters so far in ``progress``); the
result is the whole text, as before. A stream cut off mid-reply fails the turn
(``ProviderStreamCut``, as a ``ToolError``): no half message is ever answered.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from mesh._errors import InvalidParams, MeshError, ToolError
from mesh._logging import get_logger
from mesh._rpc.peer import RequestContext
from mesh._sdk.agent import Agent
from mesh._sdk.runner import EXIT_REFUSED, run_agent
from mesh._telemetry.tracing import operation
from mesh.manifests._load import load_manifest
from mesh.manifests._types import Persona
from mesh.providers import Provider, ProviderConfig, ProviderError, create_provider
from mesh.providers._base import Completion
from mesh.rooms._budget import end_of_reply
from mesh.rooms._mesh import ROOM_PERSONA, ROOM_TURN, PersonaInfo
from mesh.rooms._model import TurnReply, TurnRequest
from mesh.rooms._roles import ROLE_PROMPTS, role_persona

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["PersonaAgent", "admit", "main", "read_script"]

log = get_logger("mesh.persona")

#: Rooms remembered per persona; the oldest is forgotten beyond this. A room it
#: forgot treats its next request as new, which is the right call for a room
#: that has been silent through a thousand others.
MAX_ROOMS: Final = 1024

#: The finish reasons that say a reply was cut by its token budget (OpenAI-compatible
#: and Ollama ``length``, Anthropic ``max_tokens``, Gemini ``MAX_TOKENS``).
_CUT: Final = frozenset({"length", "max_tokens", "MAX_TOKENS"})

Admission = Literal["speak", "replay", "stale", "busy"]


@dataclass
class _Seat:
    """This persona's place in one room."""

    turn: int
    draw: int = 0
    reply: TurnReply | None = None
    busy: bool = True


def admit(seat: _Seat | None, turn: int, draw: int = 0) -> Admission:
    """What to do with a request for ``draw`` of ``turn``, given the room's seat (pure)."""
    if seat is None or turn > seat.turn:
        return "speak"
    if turn < seat.turn:
        return "stale"
    if draw > seat.draw:  # the room set the last reply aside: a new one is wanted
        return "busy" if seat.busy else "speak"
    if seat.reply is not None:
        return "replay"
    return "busy" if seat.busy else "speak"


def chat_span(provider: Any) -> AbstractContextManager[Span | None]:
    """``chat {model}``: one provider call, per OpenTelemetry's GenAI conventions."""
    model = str(getattr(provider, "model", "") or "")
    name = str(getattr(getattr(provider, "config", None), "provider", "") or "")
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": name}
    if model:
        attributes["gen_ai.request.model"] = model
    return operation(f"chat {model}".strip(), attributes)


def record_completion(span: Span | None, completion: Completion) -> None:
    """The answer's model, token usage and finish reason (never its text)."""
    if span is None:
        return
    span.set_attribute("gen_ai.response.model", completion.model)
    if completion.usage.input_tokens is not None:
        span.set_attribute("gen_ai.usage.input_tokens", completion.usage.input_tokens)
    if completion.usage.output_tokens is not None:
        span.set_attribute("gen_ai.usage.output_tokens", completion.usage.output_tokens)
    if completion.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [completion.finish_reason])


class PersonaAgent(Agent):
    """An :class:`~mesh.Agent` that takes room turns with its persona's model."""

    def __init__(
        self,
        id: str,
        persona: Persona,
        *,
        name: str | None = None,
        provider: Provider | None = None,
        description: str = "",
    ) -> None:
        super().__init__(
            id,
            name=name,
            description=description or f"A {persona.role} persona that takes turns in rooms.",
            capabilities=["chat", f"role:{persona.role}"],
        )
        self.persona = persona
        self._provider = provider
        self._seats: OrderedDict[tuple[str, str], _Seat] = OrderedDict()
        self.method(ROOM_TURN)(self._handle_turn)
        self.method(ROOM_PERSONA)(self._handle_persona)

    @property
    def provider(self) -> Provider:
        """The persona's provider, made from its config on first use."""
        if self._provider is None:
            self._provider = create_provider(self.persona.provider)
        return self._provider

    async def aclose(self) -> None:
        if self._provider is not None:
            await self._provider.aclose()

    async def take_turn(
        self, request: TurnRequest, *, on_delta: Callable[[str], None] | None = None
    ) -> TurnReply:
        """Answer one turn (or replay, or drop it; see the module docstring).

        ``on_delta`` receives the reply piece by piece as the model writes it.
        """
        room = request.room_id
        seat = self._seats.get((room, request.epoch))
        decision = admit(seat, request.turn, request.draw)
        if decision == "replay":
            assert seat is not None
            assert seat.reply is not None
            return msgspec.structs.replace(seat.reply, status="replayed")
        if decision != "speak":
            assert seat is not None
            why = (
                f"turn {request.turn} is stale: this agent was already asked for turn {seat.turn}"
                if decision == "stale"
                else f"turn {request.turn} is already being answered"
            )
            log.info("persona.turn_dropped", room=room, turn=request.turn, why=decision)
            return TurnReply(room_id=room, turn=request.turn, status="dropped", reason=why)
        return await self._speak(request, on_delta)

    async def _speak(
        self, request: TurnRequest, on_delta: Callable[[str], None] | None
    ) -> TurnReply:
        seat = _Seat(turn=request.turn, draw=request.draw)
        key = (request.room_id, request.epoch)
        self._seats[key] = seat
        self._seats.move_to_end(key)
        while len(self._seats) > MAX_ROOMS:
            self._seats.popitem(last=False)
        system = f"{self.persona.system_prompt}\n\n{request.system}".strip()
        try:
            # Each option only when set: a provider written before it does not take it.
            options: dict[str, Any] = {
                key: value
                for key, value in (
                    ("on_delta", on_delta),
                    ("max_tokens", request.max_tokens),
                    ("seed", request.seed),
                )
                if value is not None
            }
            with chat_span(self.provider) as span:
                completion = await self.provider.complete(
                    request.messages, system=system, **options
                )
                record_completion(span, completion)
        except ProviderError as exc:
            raise ToolError(str(exc), data={"type": type(exc).__name__}) from exc
        finally:
            seat.busy = False
        reply = TurnReply(
            room_id=request.room_id,
            turn=request.turn,
            text=end_of_reply(completion.text, cut=completion.finish_reason in _CUT),
            usage=completion.usage,
        )
        seat.reply = reply
        return reply

    async def _handle_turn(self, ctx: RequestContext, params: Any) -> Any:
        try:
            request = msgspec.convert(params, TurnRequest)
        except msgspec.ValidationError as exc:
            raise InvalidParams(f"invalid room/turn params: {exc}") from None
        written = 0

        def report(piece: str) -> None:
            nonlocal written
            written += len(piece)
            ctx.report_progress(written, message=piece)

        return msgspec.to_builtins(await self.take_turn(request, on_delta=report))

    async def _handle_persona(self, ctx: RequestContext, params: Any) -> Any:
        config = self.persona.provider
        info = PersonaInfo(
            id=self.id,
            name=self.name,
            role=self.persona.role,
            awareness=self.persona.awareness,
            provider=config.provider,
            model=config.model,
            context_tokens=self.persona.context_tokens,
        )
        return msgspec.to_builtins(info)


# -- the program -------------------------------------------------------------------------

_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)


def read_script(path: str | Path) -> tuple[str, ...]:
    """Replies from a script file: separated by lines holding only ``---``."""
    text = Path(path).read_text(encoding="utf-8")
    replies = tuple(part.strip() for part in _SEPARATOR.split(text) if part.strip())
    if not replies:
        raise ValueError(f"{path}: no replies (separate them with lines holding only ---)")
    return replies


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mesh.agents.persona",
        description="A persona agent for rooms. Transport flags follow (see below).",
        add_help=False,
    )
    parser.add_argument("--manifest", metavar="FILE", help="take id, name and persona from here")
    parser.add_argument("--name", help="display name (default: from the manifest, or Agent)")
    parser.add_argument("--role", help=f"one of {', '.join(ROLE_PROMPTS)}, or any word")
    parser.add_argument("--system-prompt", help="replaces the role's ready prompt")
    parser.add_argument("--awareness", choices=("basic", "intermediate", "high"))
    parser.add_argument(
        "--provider", choices=("scripted", "ollama", "openai", "anthropic", "gemini")
    )
    parser.add_argument("--model", default="", help="the model (not needed for scripted)")
    parser.add_argument("--script-file", metavar="FILE", help="scripted replies, split by ---")
    parser.add_argument("--base-url", help="the provider's endpoint, if not its default")
    parser.add_argument("--api-key-env", metavar="VAR", help="env var holding the API key")
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--max-tokens", type=int)
    return parser


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-") or "persona"


def build_agent(args: argparse.Namespace) -> PersonaAgent:
    """The agent the flags describe (the manifest first, then the flags over it)."""
    agent_id, name, persona = "persona", "Agent", None
    if args.manifest:
        manifest = load_manifest(args.manifest)
        if manifest.persona is None:
            raise ValueError(f"{args.manifest}: the manifest has no [persona] table")
        agent_id, name, persona = manifest.id, manifest.name, manifest.persona
    if persona is None or args.provider:
        if not args.provider:
            raise ValueError("--provider is required (or --manifest with a persona)")
        script = read_script(args.script_file) if args.script_file else ()
        if args.provider == "scripted" and not script:
            raise ValueError("--provider scripted needs --script-file")
        config = ProviderConfig(
            provider=args.provider,
            model=args.model,
            base_url=args.base_url,
            api_key_env=args.api_key_env,
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            script=script,
        )
        role = args.role or (persona.role if persona else "participant")
        persona = role_persona(role, config, system_prompt=args.system_prompt)
    changes = {
        key: value
        for key, value in (("role", args.role), ("awareness", args.awareness))
        if value is not None
    }
    if args.system_prompt:
        changes["system_prompt"] = args.system_prompt
    persona = msgspec.structs.replace(persona, **changes)
    if args.name:
        name = args.name
        agent_id = agent_id if args.manifest else _slug(args.name)
    # Made now, not at the first turn: a missing API key stops the agent at start-up
    # (ProviderAuthError), as docs/providers.md promises, instead of failing every turn.
    provider = create_provider(persona.provider)
    return PersonaAgent(agent_id, persona, name=name, provider=provider)


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        print("\ntransport flags:")
        run_agent(Agent("persona", description="Serve a persona agent."), ["--help"])
    args, rest = parser.parse_known_args(argv)
    try:
        agent = build_agent(args)
    except ProviderError as exc:  # the flags were fine; the provider cannot work
        print(f"persona: cannot start: {exc}", file=sys.stderr)
        sys.exit(EXIT_REFUSED)
    except (ValueError, OSError, MeshError) as exc:
        parser.error(str(exc))
    run_agent(agent, rest)


if __name__ == "__main__":
    main()
