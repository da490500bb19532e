"""Streamed replies from the four HTTP APIs, against a real loopback server.

Each API's stream is written out as its documentation shows it; the provider
must hand the text to ``on_delta`` piece by piece, return the whole text with
the usage and finish reason, and report a stream that stops early (the socket
cut mid-body, or a body without the API's end marker) as ``ProviderStreamCut``,
never as a shorter reply.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from mesh.providers import ProviderResponseError, ProviderStreamCut
from mesh.providers._stream import LineDecoder

from ._fake_server import Reply, serve_fake_provider
from ._specs import CHAT, GUARD, SPECS, SYSTEM, Sleeps, Spec, make

pytestmark = pytest.mark.anyio


def _sse(data: dict[str, Any] | str, event: str | None = None) -> str:
    body = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "") + f"data: {body}\n\n"


def _openai_chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _anthropic(kind: str, **fields: Any) -> str:
    return _sse({"type": kind, **fields}, event=kind)


def _gemini(text: str, finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}}
    if finish:
        candidate["finishReason"] = finish
    usage = {"promptTokenCount": 9, "candidatesTokenCount": 87 if finish else 1}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.0-flash"}


def _ollama(text: str, *, done: bool = False) -> str:
    line: dict[str, Any] = {"model": "llama3.2", "message": {"role": "assistant", "content": text}}
    line["done"] = done
    if done:
        line |= {"done_reason": "stop", "prompt_eval_count": 26, "eval_count": 298}
    return json.dumps(line) + "\n"


#: Per provider: the streamed body in pieces, and how many final pieces finish the reply.
STREAMS: dict[str, tuple[list[str], int]] = {
    "openai": (
        [
            _sse(_openai_chunk({"role": "assistant", "content": ""})),
            _sse(_openai_chunk({"content": "Bob: "})),
            _sse(_openai_chunk({"content": "agreed."})),
            _sse(_openai_chunk({}, finish="stop")),
            _sse({"choices": [], "usage": {"prompt_tokens": 26, "completion_tokens": 4}}),
            _sse("[DONE]"),
        ],
        3,
    ),
    "ollama": ([_ollama("Bob: "), _ollama("agreed."), _ollama("", done=True)], 1),
    "anthropic": (
        [
            _anthropic(
                "message_start",
                message={"model": "claude-sonnet-4-5-20250929", "usage": {"input_tokens": 10}},
            ),
            _anthropic("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            _anthropic("ping"),
            _anthropic(
                "content_block_delta", index=0, delta={"type": "text_delta", "text": "Bob: "}
            ),
            ": a comment line, which SSE readers skip\n",
            _anthropic(
                "content_block_delta", index=0, delta={"type": "text_delta", "text": "agreed."}
            ),
            _anthropic("content_block_stop", index=0),
            _anthropic(
                "message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 30}
            ),
            _anthropic("message_stop"),
        ],
        3,
    ),
    "gemini": ([_sse(_gemini("Bob: ")), _sse(_gemini("agreed.", finish="STOP"))], 1),
}


def _stream_reply(spec: Spec, *, keep_tail: bool = True, cut: bool = False) -> Reply:
    pieces, tail = STREAMS[spec.provider]
    shown = pieces if keep_tail else pieces[:-tail]
    kind = "application/x-ndjson" if spec.provider == "ollama" else "text/event-stream"
    return Reply(body="".join(shown).encode(), headers={"content-type": kind}, cut=cut)


async def test_a_streamed_reply_arrives_in_pieces_and_whole(spec: Spec) -> None:
    deltas: list[str] = []
    with anyio.fail_after(GUARD):
        async with (
            serve_fake_provider(_stream_reply(spec)) as server,
            aclosing(make(spec, server.url)) as provider,
        ):
            completion = await provider.complete(CHAT, system=SYSTEM, on_delta=deltas.append)
    assert deltas == ["Bob: ", "agreed."]
    assert completion.text == "Bob: agreed."
    assert completion.finish_reason == spec.finish_reason
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == spec.usage
    (request,) = server.requests
    if spec.provider == "gemini":
        assert request.target.endswith(":streamGenerateContent?alt=sse")
        assert "stream" not in request.json()
    else:
        assert request.target == spec.path and request.json()["stream"] is True
    assert request.headers["accept"] in {"text/event-stream", "application/x-ndjson"}
    assert spec.auth(request.headers)


@pytest.mark.parametrize("cut", [True, False], ids=["socket-cut", "no-end-marker"])
async def test_a_stream_that_stops_early_is_a_cut_not_a_shorter_reply(
    spec: Spec, cut: bool
) -> None:
    deltas: list[str] = []
    with anyio.fail_after(GUARD):
        async with (
            serve_fake_provider(_stream_reply(spec, keep_tail=False, cut=cut)) as server,
            aclosing(make(spec, server.url)) as provider,
        ):
            with pytest.raises(ProviderStreamCut) as caught:
                await provider.complete(CHAT, system=SYSTEM, on_delta=deltas.append)
    assert len(server.requests) == 1, "a stream that started is never retried"
    error = caught.value
    assert error.provider == spec.provider and error.model == spec.model
    assert "cut off mid-stream" in str(error) and error.received == len("".join(deltas))
    assert "Bob: " in deltas


async def test_an_error_status_before_the_stream_is_retried(spec: Spec) -> None:
    sleeps = Sleeps()
    busy = Reply(status=503, json={"error": {"message": "overloaded"}})
    with anyio.fail_after(GUARD):
        async with (
            serve_fake_provider(busy, _stream_reply(spec)) as server,
            aclosing(make(spec, server.url, sleeps)) as provider,
        ):
            completion = await provider.complete(CHAT, system=SYSTEM, on_delta=lambda _: None)
    assert completion.text == "Bob: agreed." and len(server.requests) == 2
    assert len(sleeps.waits) == 1


async def test_an_error_inside_the_stream_is_reported() -> None:
    spec = next(s for s in SPECS if s.provider == "openai")
    body = _sse(_openai_chunk({"content": "Bob"})) + _sse({"error": {"message": "GPU fell over"}})
    reply = Reply(body=body.encode(), headers={"content-type": "text/event-stream"})
    with anyio.fail_after(GUARD):
        async with (
            serve_fake_provider(reply) as server,
            aclosing(make(spec, server.url)) as provider,
        ):
            with pytest.raises(ProviderResponseError, match="GPU fell over"):
                await provider.complete(CHAT, on_delta=lambda _: None)


def test_sse_lines_become_events() -> None:
    decoder = LineDecoder("sse")
    lines = ["event: a", "data: 1", "data: 2", "", ": comment", "data:3", "id: 7", ""]
    events = [event for line in lines for event in decoder.feed(line)]
    assert events == [("a", "1\n2"), ("message", "3")]
    assert list(decoder.feed("data: tail")) == [] and list(decoder.flush()) == [("message", "tail")]


def test_ndjson_lines_are_events_and_blank_lines_are_not() -> None:
    decoder = LineDecoder("ndjson")
    assert [e for line in ['{"a":1}', "", "  ", '{"b":2}'] for e in decoder.feed(line)] == [
        ("message", '{"a":1}'),
        ("message", '{"b":2}'),
    ]
