"""Ready personas: the architect, critic, pragmatist and participant prompts (and the
review's builder), for any provider.

``role_persona("critic", ProviderConfig(provider="ollama", model="llama3"))`` is
what ``python -m mesh.agents.persona --role critic --provider ollama --model llama3``
runs. An unknown role gets the ``participant`` prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from mesh.manifests._types import Persona
from mesh.providers._base import ProviderConfig
from mesh.rooms._model import Awareness

__all__ = ["DEFAULT_ROLE", "ROLE_PROMPTS", "role_persona"]

DEFAULT_ROLE: Final = "participant"

ROLE_PROMPTS: Final[Mapping[str, str]] = {
    "architect": (
        "You are a systems architect focused on high-level design, scalability, and "
        "long-term maintainability. Consider the big picture and architectural patterns."
    ),
    "critic": (
        "You are a critical thinker who challenges assumptions and finds potential flaws. "
        "Ask tough questions and consider edge cases."
    ),
    "pragmatist": (
        "You are a pragmatic engineer focused on feasibility, tradeoffs, and practical "
        "constraints. Consider implementation complexity and real-world limitations."
    ),
    "participant": (
        "You are a thoughtful participant in this discussion. Share your perspective and "
        "engage with others' ideas."
    ),
    "builder": (
        "You are a careful software engineer who implements a plan exactly as agreed. "
        "You answer with a unified diff and nothing else."
    ),
}


def role_persona(
    role: str,
    provider: ProviderConfig,
    *,
    system_prompt: str | None = None,
    awareness: Awareness = "intermediate",
) -> Persona:
    """The persona for ``role``, speaking through ``provider``."""
    prompt = system_prompt or ROLE_PROMPTS.get(role, ROLE_PROMPTS[DEFAULT_ROLE])
    return Persona(system_prompt=prompt, provider=provider, role=role, awareness=awareness)
