"""How a named-speaker chat is shaped for each API: pure functions, no network."""

from __future__ import annotations

import itertools
import tomllib

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesh.providers import ChatMessage, ProviderConfig
from mesh.providers import _anthropic as anthropic
from mesh.providers import _gemini as gemini
from mesh.providers import _ollama as ollama
from mesh.providers import _openai as openai
from mesh.providers._http import error_detail, join_url, safe_url
from mesh.providers._mapping import (
    CONVERSATION_START,
    alternating_turns,
    hoist_system,
    speaker_text,
)

# Bob's view of a three-party room: his own turns are assistant, the others are named users.
ROOM = [
    ChatMessage(role="user", content="Let's plan the launch.", name="Ann"),
    ChatMessage(role="user", content="I'll take the budget.", name="Cy"),
    ChatMessage(role="assistant", content="I'll write the copy."),
    ChatMessage(role="system", content="Cy left the room."),
    ChatMessage(role="user", content="Deadline is Friday.", name="Ann"),
]
SYSTEM = "You are Bob, talking with Ann and Cy."


def config(provider: str, **fields: object) -> ProviderConfig:
    return msgspec.convert({"provider": provider, "model": "m", **fields}, ProviderConfig)


# -- shared helpers ---------------------------------------------------------------


def test_named_user_messages_get_a_speaker_prefix() -> None:
    assert speaker_text(ChatMessage(role="user", content="hi", name="Ann")) == "Ann: hi"
    assert speaker_text(ChatMessage(role="user", content="hi")) == "hi"


def test_own_and_already_prefixed_messages_are_left_alone() -> None:
    assert speaker_text(ChatMessage(role="assistant", content="hi", name="Bob")) == "hi"
    assert speaker_text(ChatMessage(role="user", content="Ann: hi", name="Ann")) == "Ann: hi"


def test_system_text_is_hoisted_in_order() -> None:
    system, rest = hoist_system(ROOM, SYSTEM)
    assert system == f"{SYSTEM}\n\nCy left the room."
    assert [m.role for m in rest] == ["user", "user", "assistant", "user"]
    assert hoist_system([], None) == (None, [])


def test_turns_alternate_merging_consecutive_speakers() -> None:
    _, rest = hoist_system(ROOM, None)
    assert alternating_turns(rest) == [
        ("user", "Ann: Let's plan the launch.\n\nCy: I'll take the budget."),
        ("assistant", "I'll write the copy."),
        ("user", "Ann: Deadline is Friday."),
    ]


def test_a_conversation_opening_with_the_assistant_gets_a_user_opener() -> None:
    turns = alternating_turns([ChatMessage(role="assistant", content="Hello all.")])
    assert turns == [("user", CONVERSATION_START), ("assistant", "Hello all.")]
    assert alternating_turns([]) == [("user", CONVERSATION_START)]


def test_blank_messages_are_dropped_before_merging() -> None:
    turns = alternating_turns(
        [
            ChatMessage(role="user", content="a"),
            ChatMessage(role="assistant", content="  "),
            ChatMessage(role="user", content="b"),
        ]
    )
    assert turns == [("user", "a\n\nb")]


_messages = st.lists(
    st.builds(
        ChatMessage,
        role=st.sampled_from(["user", "assistant"]),
        content=st.text(min_size=0, max_size=8),
        name=st.one_of(st.none(), st.sampled_from(["Ann", "Cy"])),
    ),
    max_size=12,
)


@given(_messages)
def test_turns_always_alternate_and_open_with_user(messages: list[ChatMessage]) -> None:
    turns = alternating_turns(messages)
    assert turns[0][0] == "user"
    assert all(a[0] != b[0] for a, b in itertools.pairwise(turns))
    assert all(text.strip() for _, text in turns)


# -- per API ----------------------------------------------------------------------


def test_openai_keeps_order_puts_system_first_and_sends_names() -> None:
    body = openai.build_request(config("openai", temperature=0.2, max_tokens=50), ROOM, SYSTEM)
    assert body == {
        "model": "m",
        "temperature": 0.2,
        "max_tokens": 50,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Ann: Let's plan the launch.", "name": "Ann"},
            {"role": "user", "content": "Cy: I'll take the budget.", "name": "Cy"},
            {"role": "assistant", "content": "I'll write the copy."},
            {"role": "system", "content": "Cy left the room."},
            {"role": "user", "content": "Ann: Deadline is Friday.", "name": "Ann"},
        ],
    }


def test_openai_names_are_fitted_to_the_allowed_pattern() -> None:
    assert openai.wire_name("Dr. Ann Lee") == "Dr_Ann_Lee"
    assert openai.wire_name("ok-name_1") == "ok-name_1"
    assert openai.wire_name("x" * 80) == "x" * 64
    assert openai.wire_name("???") is None


def test_openai_omits_unset_settings_and_empty_system() -> None:
    body = openai.build_request(config("openai"), [ChatMessage(role="user", content="hi")], None)
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_ollama_prefixes_names_and_puts_settings_in_options() -> None:
    body = ollama.build_request(config("ollama", temperature=0.7, max_tokens=64), ROOM, SYSTEM)
    assert body["stream"] is False
    assert body["options"] == {"temperature": 0.7, "num_predict": 64}
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert body["messages"][1] == {"role": "user", "content": "Ann: Let's plan the launch."}
    assert all("name" not in m for m in body["messages"])
    assert "options" not in ollama.build_request(config("ollama"), ROOM, None)


def test_anthropic_has_top_level_system_alternating_turns_and_a_token_limit() -> None:
    body = anthropic.build_request(config("anthropic", temperature=0.1), ROOM, SYSTEM)
    assert body == {
        "model": "m",
        "max_tokens": anthropic.DEFAULT_MAX_TOKENS,
        "temperature": 0.1,
        "system": f"{SYSTEM}\n\nCy left the room.",
        "messages": [
            {
                "role": "user",
                "content": "Ann: Let's plan the launch.\n\nCy: I'll take the budget.",
            },
            {"role": "assistant", "content": "I'll write the copy."},
            {"role": "user", "content": "Ann: Deadline is Friday."},
        ],
    }


def test_anthropic_uses_the_configured_token_limit_and_omits_an_absent_system() -> None:
    body = anthropic.build_request(
        config("anthropic", max_tokens=99), [ChatMessage(role="user", content="hi")], None
    )
    assert body["max_tokens"] == 99
    assert "system" not in body


def test_gemini_uses_model_role_parts_and_system_instruction() -> None:
    body = gemini.build_request(config("gemini", temperature=0.3, max_tokens=77), ROOM, SYSTEM)
    assert body == {
        "systemInstruction": {"parts": [{"text": f"{SYSTEM}\n\nCy left the room."}]},
        "generationConfig": {"temperature": 0.3, "maxOutputTokens": 77},
        "contents": [
            {
                "role": "user",
                "parts": [{"text": "Ann: Let's plan the launch.\n\nCy: I'll take the budget."}],
            },
            {"role": "model", "parts": [{"text": "I'll write the copy."}]},
            {"role": "user", "parts": [{"text": "Ann: Deadline is Friday."}]},
        ],
    }
    assert "model" not in body  # the model is in the URL


def test_gemini_omits_empty_generation_config() -> None:
    body = gemini.build_request(config("gemini"), [ChatMessage(role="user", content="hi")], None)
    assert body == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def test_gemini_retry_delay_is_read_from_the_error_body() -> None:
    body = msgspec.json.encode(
        {
            "error": {
                "code": 429,
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {"@type": "type.googleapis.com/google.rpc.Help", "links": []},
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "22s"},
                ],
            }
        }
    )
    assert gemini.retry_delay_from_body(body) == 22.0
    assert gemini.retry_delay_from_body(b"not json") is None
    assert gemini.retry_delay_from_body(b'{"error": {"details": "x"}}') is None


# -- URLs, error bodies, config ---------------------------------------------------


@pytest.mark.parametrize(
    ("base", "path", "url"),
    [
        (
            "https://api.openai.com",
            "/v1/chat/completions",
            "https://api.openai.com/v1/chat/completions",
        ),
        ("http://h:8000/v1", "/v1/chat/completions", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1/", "/v1/chat/completions", "http://h:8000/v1/chat/completions"),
        ("http://h/proxy", "/api/chat", "http://h/proxy/api/chat"),
    ],
)
def test_join_url_does_not_double_the_version(base: str, path: str, url: str) -> None:
    assert join_url(base, path) == url


def test_safe_url_drops_credentials_and_query() -> None:
    assert safe_url("https://u:secret@h:1/v1/x?key=secret") == "https://h:1/v1/x"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"error": "model \\"x\\" not found"}', 'model "x" not found'),
        (
            b'{"error": {"message": "bad", "type": "invalid_request_error"}}',
            "invalid_request_error: bad",
        ),
        (
            b'{"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}',
            "INVALID_ARGUMENT: bad",
        ),
        (b'{"error": {"message": "plain"}}', "plain"),
        (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        (b"", None),
    ],
)
def test_error_detail_finds_the_providers_message(body: bytes, detail: str | None) -> None:
    assert error_detail(body) == detail


def test_error_detail_redacts_the_key_and_truncates() -> None:
    assert error_detail(b'{"error": "bad key sk-123"}', secret="sk-123") == "bad key [redacted]"
    assert len(error_detail(b"x" * 5000) or "") == 303


def test_config_decodes_from_a_manifest_table() -> None:
    table = tomllib.loads(
        """
        [provider]
        provider = "anthropic"
        model = "claude-sonnet-4-5"
        temperature = 0.4
        max_tokens = 300
        api_key_env = "MY_CLAUDE_KEY"
        """
    )["provider"]
    cfg = msgspec.convert(table, ProviderConfig)
    assert cfg.resolved_api_key_env() == "MY_CLAUDE_KEY"
    assert cfg.resolved_base_url() == "https://api.anthropic.com"
    assert (cfg.timeout, cfg.max_retries) == (60.0, 3)


@pytest.mark.parametrize(
    ("provider", "base_url", "key_env"),
    [
        ("ollama", "http://127.0.0.1:11434", None),
        ("openai", "https://api.openai.com", "OPENAI_API_KEY"),
        ("anthropic", "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
        ("gemini", "https://generativelanguage.googleapis.com", "GEMINI_API_KEY"),
    ],
)
def test_config_defaults_per_provider(provider: str, base_url: str, key_env: str | None) -> None:
    cfg = config(provider)
    assert cfg.resolved_base_url() == base_url
    assert cfg.resolved_api_key_env() == key_env


def test_empty_api_key_env_means_no_key() -> None:
    assert config("openai", api_key_env="").resolved_api_key_env() is None


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"provider": "openai"}, "model"),
        ({"provider": "scripted"}, "script"),
        ({"provider": "openai", "model": "m", "base_url": "ftp://x"}, "base_url"),
        ({"provider": "openai", "model": "m", "timeout": 0}, "timeout"),
        ({"provider": "openai", "model": "m", "max_retries": -1}, "max_retries"),
        ({"provider": "openai", "model": "m", "max_tokens": 0}, "max_tokens"),
        ({"provider": "openai", "model": "m", "tempreature": 1}, "tempreature"),
        ({"provider": "mistral", "model": "m"}, "provider"),
    ],
)
def test_invalid_configs_are_rejected_naming_the_field(
    fields: dict[str, object], path: str
) -> None:
    with pytest.raises(msgspec.ValidationError, match=path):
        msgspec.convert(fields, ProviderConfig)


# -- one call's budget and seed ----------------------------------------------------------


def test_seed_and_frequency_penalty_reach_each_api_that_has_them() -> None:
    chat = [ChatMessage(role="user", content="hi")]
    tuned = {"seed": 7, "frequency_penalty": 0.5}
    assert openai.build_request(config("openai", **tuned), chat, None) == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "seed": 7,
        "frequency_penalty": 0.5,
    }
    options = ollama.build_request(config("ollama", **tuned), chat, None)["options"]
    assert options == {"seed": 7, "frequency_penalty": 0.5}
    generation = gemini.build_request(config("gemini", **tuned), chat, None)["generationConfig"]
    assert generation == {"seed": 7, "frequencyPenalty": 0.5}
    assert "seed" not in anthropic.build_request(config("anthropic", **tuned), chat, None)


def test_a_calls_budget_is_the_smaller_and_its_seed_wins() -> None:
    base = config("openai", max_tokens=100, seed=1)
    assert base.for_call() is base
    assert (base.for_call(max_tokens=40).max_tokens, base.for_call(max_tokens=400).max_tokens) == (
        40,
        100,
    )
    assert config("openai").for_call(max_tokens=40, seed=9).max_tokens == 40
    assert base.for_call(seed=9).seed == 9
    with pytest.raises(ValueError, match="frequency_penalty"):
        config("openai", frequency_penalty=3.0)
