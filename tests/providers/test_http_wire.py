"""What each real provider sends, and how it handles keys: checked on a live local server.

The fake server answers in the provider's documented wire format and records
every request, so these tests assert the path, the auth header and the JSON
body we send, as well as what we make of the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from mesh.providers import (
    HttpProvider,
    ProviderAuthError,
    ProviderConfig,
    create_provider,
    open_provider,
)

from ._fake_server import Reply, serve_fake_provider
from ._specs import (
    CHAT,
    GEMINI,
    GUARD,
    KEY,
    KEYED,
    OLLAMA,
    OPENAI,
    SYSTEM,
    Sleeps,
    Spec,
    complete_once,
    make,
)

pytestmark = pytest.mark.anyio


# -- the happy path and the request shape -----------------------------------------


async def test_happy_path_sends_the_documented_request(spec: Spec) -> None:
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(json=spec.success)) as server:
            completion = await complete_once(make(spec, server.url))
    assert completion.text == "Bob: agreed."
    assert completion.provider == spec.provider
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == spec.usage
    assert completion.finish_reason == spec.finish_reason
    assert completion.raw == spec.success
    [request] = server.requests
    assert request.method == "POST"
    assert request.target == spec.path
    assert request.headers["content-type"] == "application/json"
    assert spec.auth(request.headers)
    check_body[spec.provider](request.json())


def _ollama_body(body: dict[str, Any]) -> None:
    assert body["model"] == "llama3.2"
    assert body["stream"] is False
    assert body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Ann: Shall we begin?"},
        {"role": "assistant", "content": "Yes."},
        {"role": "user", "content": "Ann: Then go on."},
    ]


def _openai_body(body: dict[str, Any]) -> None:
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert body["messages"][1] == {"role": "user", "content": "Ann: Shall we begin?", "name": "Ann"}
    assert body["messages"][2] == {"role": "assistant", "content": "Yes."}


def _anthropic_body(body: dict[str, Any]) -> None:
    assert body["model"] == "claude-sonnet-4-5"
    assert body["system"] == SYSTEM
    assert body["max_tokens"] == 1024
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


def _gemini_body(body: dict[str, Any]) -> None:
    assert body["systemInstruction"] == {"parts": [{"text": SYSTEM}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][0]["parts"] == [{"text": "Ann: Shall we begin?"}]


check_body: dict[str, Callable[[dict[str, Any]], None]] = {
    "ollama": _ollama_body,
    "openai": _openai_body,
    "anthropic": _anthropic_body,
    "gemini": _gemini_body,
}


async def test_settings_reach_the_wire(spec: Spec) -> None:
    where: Callable[[Any], tuple[float, int]] = {
        "ollama": lambda b: (b["options"]["temperature"], b["options"]["num_predict"]),
        "openai": lambda b: (b["temperature"], b["max_tokens"]),
        "anthropic": lambda b: (b["temperature"], b["max_tokens"]),
        "gemini": lambda b: (
            b["generationConfig"]["temperature"],
            b["generationConfig"]["maxOutputTokens"],
        ),
    }[spec.provider]
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(json=spec.success)) as server:
            await complete_once(make(spec, server.url, temperature=0.25, max_tokens=123))
    assert where(server.requests[0].json()) == (0.25, 123)


async def test_a_shared_client_is_used_and_left_open(spec: Spec) -> None:
    replies = [Reply(json=spec.success), Reply(json=spec.success)]
    env = {spec.key_env: KEY} if spec.key_env else {}
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(*replies) as server, httpx.AsyncClient() as client:
            config = ProviderConfig(provider=spec.provider, model=spec.model, base_url=server.url)
            for _ in replies:
                async with open_provider(config, http_client=client, env=env) as provider:
                    await provider.complete(CHAT)
                assert not client.is_closed
    assert len(server.requests) == 2


# -- authentication ---------------------------------------------------------------


async def test_401_is_an_auth_error_naming_the_env_var(spec: Spec) -> None:
    sleeps = Sleeps()
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(status=401, json=spec.error_body)) as server:
            with pytest.raises(ProviderAuthError) as caught:
                await complete_once(make(spec, server.url, sleeps))
    assert sleeps.waits == []
    assert len(server.requests) == 1
    error = caught.value
    assert error.status == 401
    assert error.env_var == spec.key_env
    if spec.key_env:
        assert spec.key_env in str(error)
    else:
        assert "api_key_env" in str(error)
    assert KEY not in str(error)


async def test_gemini_rejected_key_arrives_as_400_and_is_an_auth_error() -> None:
    body = {
        "error": {
            "code": 400,
            "message": "API key not valid. Please pass a valid API key.",
            "status": "INVALID_ARGUMENT",
        }
    }
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(status=400, json=body)) as server:
            with pytest.raises(ProviderAuthError, match="GEMINI_API_KEY"):
                await complete_once(make(GEMINI, server.url))


async def test_a_key_echoed_back_in_an_error_is_redacted(spec: Spec) -> None:
    echo = {"error": {"message": f"Incorrect API key provided: {KEY}."}}
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(status=403, json=echo)) as server:
            with pytest.raises(ProviderAuthError) as caught:
                await complete_once(
                    make(
                        spec,
                        server.url,
                        env={spec.key_env or "K": KEY},
                        api_key_env=spec.key_env or "K",
                    )
                )
    assert KEY not in str(caught.value)
    assert KEY not in repr(caught.value.__dict__)
    assert "[redacted]" in str(caught.value)


@pytest.mark.parametrize("key", KEYED, ids=lambda s: s.provider)
def test_a_missing_key_fails_at_construction_naming_the_variable(key: Spec) -> None:
    config = ProviderConfig(provider=key.provider, model=key.model)
    with pytest.raises(ProviderAuthError) as caught:
        create_provider(config, env={})
    assert caught.value.env_var == key.key_env
    assert f"env var {key.key_env} is not set" in str(caught.value)


def test_a_blank_key_counts_as_missing_and_custom_variables_are_named() -> None:
    config = ProviderConfig(provider="openai", model="m", api_key_env="TEAM_OPENAI_KEY")
    with pytest.raises(ProviderAuthError, match="TEAM_OPENAI_KEY"):
        create_provider(config, env={"TEAM_OPENAI_KEY": "  ", "OPENAI_API_KEY": KEY})


def test_the_key_is_read_from_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    config = ProviderConfig(provider="anthropic", model="m")
    with pytest.raises(ProviderAuthError, match="ANTHROPIC_API_KEY"):
        create_provider(config)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    assert isinstance(create_provider(config), HttpProvider)


async def test_ollama_sends_a_bearer_key_only_when_one_is_configured() -> None:
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(json=OLLAMA.success)) as server:
            provider = make(OLLAMA, server.url, env={"OLLAMA_KEY": KEY}, api_key_env="OLLAMA_KEY")
            await complete_once(provider)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


async def test_openai_compatible_server_without_a_key() -> None:
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(json=OPENAI.success)) as server:
            provider = make(OPENAI, server.url + "/v1", env={}, api_key_env="")
            await complete_once(provider)
    assert "authorization" not in server.requests[0].headers
    assert server.requests[0].target == "/v1/chat/completions"
