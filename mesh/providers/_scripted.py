"""A provider that answers from a script: offline, instant, deterministic.

Reply *n* is ``script[n % len(script)]``, where *n* is the number of
``assistant`` messages already in the conversation it is shown, that is, how
many times this agent has spoken. The choice depends only on the history, not
on hidden state, so the same room replays identically, one persona can sit in
many rooms, and a room resumed after a crash picks up at the right line. When
the script runs out it **cycles** from the top; a room stops it with its limits
or an exit rule (a line saying goodbye triggers ``GOODBYE``).

Replies are templates. Exactly these tokens are replaced, and any other brace
is left alone (a reply may hold code or JSON):

``{last}``     the content of the last non-system message ("" if none)
``{speaker}``  that message's ``name``, or ``you`` when it has none
``{turn}``     this reply's number, starting at 1
``{model}``    the configured model name (``scripted`` by default)

Asked to stream (``on_delta``), it hands the reply over word by word, with the
configured ``delay`` spread over the words rather than spent before them.

Words stand in for tokens: a reply longer than the budget (the call's
``max_tokens``, or the config's, the smaller) is cut after that many words with
``finish_reason="length"``, as a model's would be; ``seed`` is recorded in
:attr:`ScriptedProvider.calls` (a script has no sampling to seed).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import anyio.lowlevel
import msgspec

from ._base import ChatMessage, Completion, ProviderBase, ProviderConfig, Usage

__all__ = ["ScriptedCall", "ScriptedProvider", "render_reply"]

_TOKEN = re.compile(r"\{(last|speaker|turn|model)\}")
#: A word and the whitespace after it: the pieces a streamed scripted reply comes in.
_PIECE = re.compile(r"\S+\s*|\s+")


class ScriptedCall(msgspec.Struct, frozen=True, kw_only=True):
    """What the scripted provider was asked, for tests that check a perspective."""

    messages: tuple[ChatMessage, ...]
    system: str | None
    max_tokens: int | None = None
    seed: int | None = None


def render_reply(template: str, messages: Sequence[ChatMessage], *, turn: int, model: str) -> str:
    """Fill the template tokens from the conversation (a pure function)."""
    last = next((m for m in reversed(messages) if m.role != "system"), None)
    values = {
        "last": last.content if last else "",
        "speaker": (last.name if last and last.name else "you"),
        "turn": str(turn),
        "model": model,
    }
    return _TOKEN.sub(lambda match: values[match.group(1)], template)


class ScriptedProvider(ProviderBase):
    """Replies from ``config.script``; ``calls`` records every request, oldest first."""

    def __init__(self, config: ProviderConfig) -> None:
        if config.provider != "scripted" or not config.script:
            raise ValueError("ScriptedProvider needs provider='scripted' and a non-empty script")
        super().__init__(config)
        self.calls: list[ScriptedCall] = []

    @property
    def model(self) -> str:
        return self.config.model or "scripted"

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        system: str | None = None,
        on_delta: Callable[[str], None] | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> Completion:
        # A real provider would yield to the event loop here; so does this one,
        # so that cancellation and deadlines behave the same in offline rooms.
        if self.config.delay and on_delta is None:
            await anyio.sleep(self.config.delay)
        else:
            await anyio.lowlevel.checkpoint()
        spoken = sum(1 for m in messages if m.role == "assistant")
        script = self.config.script
        text = render_reply(
            script[spoken % len(script)], messages, turn=spoken + 1, model=self.model
        )
        config = self.config.for_call(max_tokens=max_tokens, seed=seed)
        self.calls.append(
            ScriptedCall(
                messages=tuple(messages),
                system=system,
                max_tokens=config.max_tokens,
                seed=config.seed,
            )
        )
        pieces = _PIECE.findall(text)
        finish = "stop"
        if config.max_tokens is not None and len(text.split()) > config.max_tokens:
            pieces = [p for p in pieces if p.strip()][: config.max_tokens]
            text, finish = "".join(pieces).rstrip(), "length"
        if on_delta is not None:
            # Word by word, as a real stream arrives; the delay is spread over the words.
            for piece in pieces:
                on_delta(piece)
                if self.config.delay:
                    await anyio.sleep(self.config.delay / len(pieces))
                else:
                    await anyio.lowlevel.checkpoint()
        # Words stand in for tokens, so what counts usage can be tested without a model.
        heard = sum(len(m.content.split()) for m in messages) + len((system or "").split())
        usage = Usage(input_tokens=heard, output_tokens=len(text.split()))
        return Completion(
            text=text, model=self.model, provider="scripted", usage=usage, finish_reason=finish
        )
