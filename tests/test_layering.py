"""Dependencies point one way: ``mesh`` uses ``transports`` and ``registry``, never the reverse."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules(package: str) -> list[str]:
    walk = pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}.")
    return [package, *(info.name for info in walk)]


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [("transports", ("mesh", "registry")), ("registry", ("mesh", "transports"))],
)
def test_lower_layers_import_nothing_from_above(package: str, forbidden: tuple[str, ...]) -> None:
    if not (ROOT / package).exists():
        pytest.fail(f"{package}/ is missing")
    modules = _modules(package)
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "", f"{package} imported {result.stdout.strip()}"
