"""The package's public surface, its layering, and the runnable example in its docs."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import mesh.providers

ROOT = Path(__file__).resolve().parents[2]
CORE = {"mesh._backoff", "mesh._errors", "mesh._logging", "mesh._public"}

PUBLIC = {
    "AnthropicProvider",
    "ChatMessage",
    "Completion",
    "GeminiProvider",
    "HttpProvider",
    "OllamaProvider",
    "OpenAIProvider",
    "Provider",
    "ProviderAuthError",
    "ProviderConfig",
    "ProviderError",
    "ProviderName",
    "ProviderRateLimited",
    "ProviderResponseError",
    "ProviderStatusError",
    "ProviderStreamCut",
    "ProviderTimeout",
    "ProviderUnreachable",
    "RetryPolicy",
    "Role",
    "ScriptedCall",
    "ScriptedProvider",
    "Usage",
    "backoff_schedule",
    "create_provider",
    "open_provider",
    "parse_retry_after",
}


def test_the_public_surface_is_pinned() -> None:
    assert set(mesh.providers.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(mesh.providers, name) is not None


def test_public_names_show_the_public_module() -> None:
    modules = {getattr(mesh.providers, name).__module__ for name in PUBLIC}
    modules.discard("typing")  # the Literal aliases
    assert modules == {"mesh.providers"}


def test_providers_import_only_the_core_from_mesh() -> None:
    # Read the imports statically: importing mesh.providers runs mesh/__init__.py,
    # which is free to import the rest of mesh. The core (errors, publishing) is allowed.
    for path in (ROOT / "mesh" / "providers").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                assert node.level <= 1, f"{path.name} reaches above mesh.providers"
                names = [node.module or ""] if node.level == 0 else []
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                outside = name == "mesh" or name.startswith("mesh.")
                allowed = name.startswith("mesh.providers") or name in CORE
                assert not outside or allowed, f"{path.name}: {name}"


def test_the_scripted_example_in_the_docs_runs_offline() -> None:
    text = (ROOT / "docs" / "providers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    examples = [block for block in blocks if "anyio.run(main)" in block]
    [example] = [block for block in examples if "on_delta" not in block]
    done = subprocess.run(
        [sys.executable, "-c", example],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    printed = text.split("It prints:\n\n```text\n", 1)[1].split("```", 1)[0]
    assert done.stdout == printed


def test_the_streaming_example_in_the_docs_prints_its_pieces() -> None:
    text = (ROOT / "docs" / "providers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    [example] = [block for block in blocks if "on_delta=pieces.append" in block]
    done = subprocess.run(
        [sys.executable, "-c", example],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert done.stdout == "['Tea, ', 'then ', 'coffee, ', 'then ', 'tea.']\n"
