"""The four HTTP providers' wire formats, as their documentation shows them, and helpers.

Each ``Spec`` holds what a provider's server answers on success, on a body
missing its main field, and on an error, plus how its auth header must look.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import anyio.lowlevel

from mesh.providers import (
    ChatMessage,
    Completion,
    Provider,
    ProviderConfig,
    ProviderName,
    create_provider,
)

#: The provider tests talk to loopback only; five seconds is ages for that.
GUARD = 5.0
KEY = "sk-test-4242-secret"
CHAT = [
    ChatMessage(role="user", content="Shall we begin?", name="Ann"),
    ChatMessage(role="assistant", content="Yes."),
    ChatMessage(role="user", content="Then go on.", name="Ann"),
]
SYSTEM = "You are Bob."


@dataclass(frozen=True)
class Spec:
    """One provider's wire format, as its documentation shows it."""

    provider: ProviderName
    model: str
    path: str
    key_env: str | None
    auth: Callable[[dict[str, str]], bool]
    success: dict[str, Any]
    malformed: dict[str, Any]
    missing: str  # what the ProviderResponseError must name for ``malformed``
    error_body: dict[str, Any]
    usage: tuple[int, int]
    finish_reason: str


OLLAMA = Spec(
    provider="ollama",
    model="llama3.2",
    path="/api/chat",
    key_env=None,
    auth=lambda headers: "authorization" not in headers,
    success={
        "model": "llama3.2",
        "created_at": "2023-12-12T14:13:43.416799Z",
        "message": {"role": "assistant", "content": "Bob: agreed."},
        "done": True,
        "done_reason": "stop",
        "total_duration": 5191566416,
        "prompt_eval_count": 26,
        "eval_count": 298,
    },
    malformed={"model": "llama3.2", "done": True},
    missing="message",
    error_body={"error": "model 'llama3.2' not found"},
    usage=(26, 298),
    finish_reason="stop",
)
OPENAI = Spec(
    provider="openai",
    model="gpt-4o-mini",
    path="/v1/chat/completions",
    key_env="OPENAI_API_KEY",
    auth=lambda headers: headers.get("authorization") == f"Bearer {KEY}",
    success={
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1767772800,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Bob: agreed."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 26, "completion_tokens": 4, "total_tokens": 30},
    },
    malformed={"id": "chatcmpl-1", "object": "chat.completion"},
    missing="choices",
    error_body={
        "error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}
    },
    usage=(26, 4),
    finish_reason="stop",
)
ANTHROPIC = Spec(
    provider="anthropic",
    model="claude-sonnet-4-5",
    path="/v1/messages",
    key_env="ANTHROPIC_API_KEY",
    auth=lambda headers: (
        headers.get("x-api-key") == KEY and headers.get("anthropic-version") == "2023-06-01"
    ),
    success={
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "Bob: agreed."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 30},
    },
    malformed={"id": "msg_01", "type": "message", "role": "assistant"},
    missing="content",
    error_body={
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    },
    usage=(10, 30),
    finish_reason="end_turn",
)
GEMINI = Spec(
    provider="gemini",
    model="gemini-2.0-flash",
    path="/v1beta/models/gemini-2.0-flash:generateContent",
    key_env="GEMINI_API_KEY",
    auth=lambda headers: headers.get("x-goog-api-key") == KEY,
    success={
        "candidates": [
            {
                "content": {"parts": [{"text": "Bob: agreed."}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 87, "totalTokenCount": 96},
        "modelVersion": "gemini-2.0-flash",
    },
    malformed={"usageMetadata": {"promptTokenCount": 9}},
    missing="candidates",
    error_body={
        "error": {"code": 403, "message": "Permission denied", "status": "PERMISSION_DENIED"}
    },
    usage=(9, 87),
    finish_reason="STOP",
)
SPECS = [OLLAMA, OPENAI, ANTHROPIC, GEMINI]
KEYED = [spec for spec in SPECS if spec.key_env]


class Sleeps:
    """A ``sleep`` that records the wait and returns at once (after a checkpoint)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        await anyio.lowlevel.checkpoint()


def make(
    spec: Spec,
    base_url: str,
    sleeps: Sleeps | None = None,
    *,
    env: dict[str, str] | None = None,
    **fields: Any,
) -> Provider:
    config = ProviderConfig(provider=spec.provider, model=spec.model, base_url=base_url, **fields)
    return create_provider(
        config,
        env={spec.key_env: KEY} if env is None and spec.key_env else (env or {}),
        sleep=sleeps or Sleeps(),
        random=lambda: 0.5,
    )


async def complete_once(provider: Provider) -> Completion:
    async with aclosing(provider):
        return await provider.complete(CHAT, system=SYSTEM)
