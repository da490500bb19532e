"""The registry is a bottom layer: it imports neither mesh nor transports.

Also pins the public surface, so that a change to it is a deliberate one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import registry

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import sys
import registry
wrong = sorted(m for m in sys.modules if m.split(".")[0] in ("mesh", "transports"))
print(",".join(wrong))
"""


def test_importing_registry_imports_neither_mesh_nor_transports() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"registry imported: {result.stdout.strip()}"


def test_public_surface() -> None:
    assert set(registry.__all__) == {
        "DEFAULT_GRACE",
        "DEFAULT_INTERVAL",
        "DEFAULT_SUBSCRIBER_BUFFER",
        "TTL_FACTOR",
        "AgentId",
        "AgentRecord",
        "AgentStatus",
        "ChangeKind",
        "InvalidAgentRecord",
        "Listener",
        "Registry",
        "RegistryError",
        "RegistryStatistics",
        "StatusChange",
        "SubscriberOverflow",
        "Subscription",
        "UnknownAgent",
        "run_expiry",
    }
    for name in registry.__all__:
        assert getattr(registry, name) is not None


def test_py_typed_is_shipped() -> None:
    assert (ROOT / "registry" / "py.typed").is_file()
