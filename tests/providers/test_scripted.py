"""The scripted provider: deterministic replies that make rooms run offline."""

from __future__ import annotations

import anyio
import pytest

from mesh.providers import (
    ChatMessage,
    Provider,
    ProviderConfig,
    ScriptedCall,
    ScriptedProvider,
    create_provider,
)
from mesh.providers._scripted import render_reply

pytestmark = pytest.mark.anyio

GUARD = 5.0


def scripted(*lines: str, model: str = "") -> ScriptedProvider:
    provider = create_provider(ProviderConfig(provider="scripted", model=model, script=lines))
    assert isinstance(provider, ScriptedProvider)
    return provider


def history(spoken: int) -> list[ChatMessage]:
    """A chat in which this agent has already spoken ``spoken`` times."""
    messages: list[ChatMessage] = []
    for n in range(spoken):
        messages.append(ChatMessage(role="user", content=f"question {n}", name="Ann"))
        messages.append(ChatMessage(role="assistant", content=f"answer {n}"))
    messages.append(ChatMessage(role="user", content="next?", name="Ann"))
    return messages


async def test_replies_follow_the_script_by_how_often_the_agent_has_spoken() -> None:
    provider = scripted("one", "two", "three")
    texts = [(await provider.complete(history(n))).text for n in range(3)]
    assert texts == ["one", "two", "three"]


async def test_the_script_cycles_when_it_runs_out() -> None:
    provider = scripted("one", "two")
    texts = [(await provider.complete(history(n))).text for n in range(5)]
    assert texts == ["one", "two", "one", "two", "one"]


async def test_the_same_history_gets_the_same_reply() -> None:
    provider = scripted("a {turn}", "b {turn}")
    first = await provider.complete(history(1))
    again = await provider.complete(history(1))
    fresh = await scripted("a {turn}", "b {turn}").complete(history(1))
    assert first == again == fresh
    assert first.text == "b 2"


async def test_templates_see_the_last_message_and_its_speaker() -> None:
    provider = scripted("{speaker} said '{last}' (turn {turn}, {model})", model="persona-1")
    completion = await provider.complete(
        [
            ChatMessage(role="user", content="hello there", name="Ann"),
            ChatMessage(role="system", content="Cy joined."),
        ]
    )
    assert completion.text == "Ann said 'hello there' (turn 1, persona-1)"
    assert completion.model == "persona-1"
    assert completion.provider == "scripted"
    assert completion.finish_reason == "stop"
    assert completion.raw is None


def test_only_known_tokens_are_replaced() -> None:
    template = "def f(): return {'k': {last}} {unknown} {{turn}}"
    text = render_reply(template, [ChatMessage(role="user", content="1")], turn=4, model="m")
    assert text == "def f(): return {'k': 1} {unknown} {4}"


def test_an_empty_chat_renders_blanks() -> None:
    assert render_reply("[{last}|{speaker}|{turn}]", [], turn=1, model="m") == "[|you|1]"


async def test_calls_record_what_the_agent_was_shown() -> None:
    provider = scripted("ok")
    chat = history(0)
    await provider.complete(chat, system="You are Bob.")
    assert provider.calls == [ScriptedCall(messages=tuple(chat), system="You are Bob.")]


async def test_a_cancelled_call_does_not_reply() -> None:
    provider = scripted("ok")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await provider.complete(history(0))
    assert scope.cancelled_caught
    assert provider.calls == []


async def test_scripted_needs_no_key_and_closes_cleanly() -> None:
    config = ProviderConfig(provider="scripted", script=("hi",))
    provider = create_provider(config, env={})
    assert isinstance(provider, Provider)
    assert provider.config is config
    async with ScriptedProvider(config) as same:
        assert (await same.complete([])).text == "hi"
    await provider.aclose()
    await provider.aclose()  # idempotent


def test_scripted_provider_rejects_other_configs() -> None:
    with pytest.raises(ValueError, match="scripted"):
        ScriptedProvider(ProviderConfig(provider="openai", model="m"))


def perspective(transcript: list[tuple[str, str]], me: str) -> list[ChatMessage]:
    """The room as ``me`` sees it: own lines as assistant, others as named users."""
    return [
        ChatMessage(role="assistant", content=text)
        if speaker == me
        else ChatMessage(role="user", content=text, name=speaker)
        for speaker, text in transcript
    ]


async def test_two_scripted_personas_hold_a_deterministic_conversation() -> None:
    agents = {
        "Ann": scripted(
            "Let's talk about tea.",
            "Good point, {speaker}. Green or black?",
            "Agreed: {last}",
            "Goodbye!",
        ),
        "Bob": scripted("Tea is great.", "Turn {turn}: green, please.", "Either works."),
    }

    async def run_room() -> list[tuple[str, str]]:
        transcript: list[tuple[str, str]] = [("Host", "Topic: tea")]
        while len(transcript) < 11 and not transcript[-1][1].startswith("Goodbye"):
            speaker = ["Ann", "Bob"][(len(transcript) - 1) % 2]
            view = perspective(transcript, speaker)
            reply = await agents[speaker].complete(view, system=f"You are {speaker}.")
            transcript.append((speaker, reply.text))
        return transcript

    with anyio.fail_after(GUARD):
        first = await run_room()
        second = await run_room()
    assert first == second
    assert first[1:] == [
        ("Ann", "Let's talk about tea."),
        ("Bob", "Tea is great."),
        ("Ann", "Good point, Bob. Green or black?"),
        ("Bob", "Turn 2: green, please."),
        ("Ann", "Agreed: Turn 2: green, please."),
        ("Bob", "Either works."),
        ("Ann", "Goodbye!"),
    ]


async def test_a_reply_past_its_budget_is_cut_after_that_many_words_and_says_length() -> None:
    provider = scripted("one two three four five six")
    pieces: list[str] = []
    with anyio.fail_after(GUARD):
        whole = await provider.complete(history(0))
        cut = await provider.complete(history(0), max_tokens=4, seed=11, on_delta=pieces.append)
    assert (whole.text, whole.finish_reason) == ("one two three four five six", "stop")
    assert (cut.text, cut.finish_reason) == ("one two three four", "length")
    assert "".join(pieces).strip() == cut.text and cut.usage.output_tokens == 4
    assert (provider.calls[1].max_tokens, provider.calls[1].seed) == (4, 11)
    assert provider.calls[0].seed is None
