"""How each real provider fails and retries, against a live local server.

429 with Retry-After, 5xx, dropped connections, persistent errors, unusable
bodies, a closed port and a hung server. Retry waits go to a recording
``sleep``, never to the clock.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from mesh.providers import (
    ProviderAuthError,
    ProviderError,
    ProviderRateLimited,
    ProviderResponseError,
    ProviderStatusError,
    ProviderTimeout,
    ProviderUnreachable,
)

from ._fake_server import FakeServer, Reply, closed_port, serve_fake_provider
from ._specs import (
    ANTHROPIC,
    GEMINI,
    GUARD,
    KEY,
    OLLAMA,
    OPENAI,
    Sleeps,
    Spec,
    complete_once,
    make,
)

pytestmark = pytest.mark.anyio


# -- retries ----------------------------------------------------------------------


async def test_429_with_retry_after_waits_as_asked_then_succeeds(spec: Spec) -> None:
    sleeps = Sleeps()
    replies = [
        Reply(status=429, json={"error": "slow down"}, headers={"Retry-After": "7"}),
        Reply(json=spec.success),
    ]
    with anyio.fail_after(GUARD), capture_logs() as logs:
        async with serve_fake_provider(*replies) as server:
            completion = await complete_once(make(spec, server.url, sleeps))
    assert completion.text == "Bob: agreed."
    assert sleeps.waits == [7.0]
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body
    [retry] = [entry for entry in logs if entry["event"] == "provider retry"]
    assert retry["status"] == 429
    assert retry["wait"] == 7.0
    assert KEY not in repr(logs)


async def test_retry_after_as_http_date_in_the_past_retries_at_once(spec: Spec) -> None:
    sleeps = Sleeps()
    past = {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(
            Reply(status=503, json={"error": "busy"}, headers=past), Reply(json=spec.success)
        ) as server:
            await complete_once(make(spec, server.url, sleeps))
    assert sleeps.waits == [0.0]


async def test_a_huge_retry_after_is_capped(spec: Spec) -> None:
    sleeps = Sleeps()
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(
            Reply(status=429, json={}, headers={"Retry-After": "86400"}), Reply(json=spec.success)
        ) as server:
            await complete_once(make(spec, server.url, sleeps))
    assert sleeps.waits == [60.0]


async def test_5xx_backs_off_with_jitter_then_succeeds(spec: Spec) -> None:
    sleeps = Sleeps()
    replies = [
        Reply(status=500, json={"error": "boom"}),
        Reply(status=502, body=b"<html>Bad Gateway</html>"),
        Reply(json=spec.success),
    ]
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(*replies) as server:
            completion = await complete_once(make(spec, server.url, sleeps))
    assert completion.text == "Bob: agreed."
    assert sleeps.waits == [0.25, 0.5]  # random() = 0.5 of the ceilings 0.5 and 1.0
    assert len(server.requests) == 3


async def test_a_dropped_connection_is_retried(spec: Spec) -> None:
    sleeps = Sleeps()
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(drop=True), Reply(json=spec.success)) as server:
            completion = await complete_once(make(spec, server.url, sleeps))
    assert completion.text == "Bob: agreed."
    assert sleeps.waits == [0.25]


async def test_rate_limit_that_never_lifts_raises_after_the_retries(spec: Spec) -> None:
    sleeps = Sleeps()
    limited = Reply(status=429, json=spec.error_body, headers={"Retry-After": "2"})
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(*[limited] * 3) as server:
            with pytest.raises(ProviderRateLimited) as caught:
                await complete_once(make(spec, server.url, sleeps, max_retries=2))
    assert sleeps.waits == [2.0, 2.0]
    assert len(server.requests) == 3
    error = caught.value
    assert (error.status, error.retry_after, error.attempts) == (429, 2.0, 3)
    assert error.provider == spec.provider
    assert server.url in str(error)
    assert "after 3 attempts" in str(error)


async def test_server_errors_that_persist_raise_a_status_error(spec: Spec) -> None:
    sleeps = Sleeps()
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(*[Reply(status=503, json=spec.error_body)] * 2) as server:
            with pytest.raises(ProviderStatusError) as caught:
                await complete_once(make(spec, server.url, sleeps, max_retries=1))
    assert caught.value.status == 503
    assert "server error" in str(caught.value)
    assert len(sleeps.waits) == 1


async def test_a_4xx_is_not_retried_and_carries_the_providers_message(spec: Spec) -> None:
    sleeps = Sleeps()
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(status=404, json=spec.error_body)) as server:
            with pytest.raises(ProviderStatusError) as caught:
                await complete_once(make(spec, server.url, sleeps))
    assert sleeps.waits == []
    assert len(server.requests) == 1
    error = caught.value
    assert error.status == 404
    assert error.detail is not None
    assert error.detail.split(": ")[-1] in str(error)
    assert spec.model in str(error)
    assert spec.path in str(error)


# -- bodies we cannot use ---------------------------------------------------------


async def test_a_body_missing_its_main_field_says_what_is_missing(spec: Spec) -> None:
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(json=spec.malformed)) as server:
            with pytest.raises(ProviderResponseError) as caught:
                await complete_once(make(spec, server.url))
    assert f"`{spec.missing}`" in str(caught.value)
    assert caught.value.status == 200


async def test_a_body_that_is_not_json_is_a_response_error(spec: Spec) -> None:
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(body=b"<html>proxy says hi</html>")) as server:
            with pytest.raises(ProviderResponseError, match="not JSON"):
                await complete_once(make(spec, server.url))


async def test_a_json_array_body_is_a_response_error(spec: Spec) -> None:
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(json=[1, 2])) as server:
            with pytest.raises(ProviderResponseError, match="not an object"):
                await complete_once(make(spec, server.url))


@pytest.mark.parametrize(
    ("spec_", "body", "match"),
    [
        (OPENAI, {"choices": []}, "`choices` is empty"),
        (
            OPENAI,
            {"choices": [{"message": {"content": None, "refusal": "no"}, "finish_reason": "stop"}]},
            "refusal: no",
        ),
        (
            ANTHROPIC,
            {"content": [{"type": "tool_use", "id": "t"}], "stop_reason": "tool_use"},
            "no text block",
        ),
        (GEMINI, {"promptFeedback": {"blockReason": "SAFETY"}}, "blockReason=SAFETY"),
        (GEMINI, {"candidates": [{"finishReason": "SAFETY"}]}, "finishReason=SAFETY"),
        (OLLAMA, {"error": "model is loading"}, "model is loading"),
        (OLLAMA, {"message": {"role": "assistant"}}, "`content`"),
    ],
    ids=[
        "openai-empty",
        "openai-refusal",
        "anthropic-no-text",
        "gemini-blocked",
        "gemini-safety",
        "ollama-error",
        "ollama-no-content",
    ],
)
async def test_answers_without_text_are_explained(
    spec_: Spec, body: dict[str, Any], match: str
) -> None:
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(json=body)) as server:
            with pytest.raises(ProviderResponseError, match=match):
                await complete_once(make(spec_, server.url))


# -- no server, slow server -------------------------------------------------------


async def test_a_closed_port_is_unreachable_after_the_retries(spec: Spec) -> None:
    sleeps = Sleeps()
    with anyio.fail_after(GUARD):
        url = f"http://127.0.0.1:{await closed_port()}"
        with pytest.raises(ProviderUnreachable) as caught:
            await complete_once(make(spec, url, sleeps, max_retries=2))
    assert sleeps.waits == [0.25, 0.5]
    error = caught.value
    assert error.attempts == 3
    assert isinstance(error.__cause__, httpx.ConnectError)
    assert url in str(error)
    assert error.status is None


async def test_a_hung_server_times_out_without_retrying(spec: Spec) -> None:
    sleeps = Sleeps()
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(hang=True)) as server:
            with pytest.raises(ProviderTimeout) as caught:
                await complete_once(make(spec, server.url, sleeps, timeout=0.2))
    assert sleeps.waits == []
    assert "0.2 s" in str(caught.value)
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)


async def test_every_error_is_a_provider_error(spec: Spec) -> None:
    for kind in (
        ProviderAuthError,
        ProviderRateLimited,
        ProviderResponseError,
        ProviderStatusError,
        ProviderTimeout,
        ProviderUnreachable,
    ):
        assert issubclass(kind, ProviderError)
    with anyio.fail_after(GUARD):
        async with serve_fake_provider(Reply(status=418, json={})) as server:
            with pytest.raises(ProviderError):
                await complete_once(make(spec, server.url))


async def test_serve_fake_provider_reports_an_unplanned_request() -> None:
    with anyio.fail_after(GUARD):
        async with serve_fake_provider() as server:
            with pytest.raises(ProviderStatusError, match="no scripted reply left"):
                await complete_once(make(OPENAI, server.url, max_retries=0))
    assert isinstance(server, FakeServer)
