"""The complexity ratchet: no function is over ruff's C901 ceiling but those pyproject lists.

``make lint`` runs ruff with the ceiling (``[tool.ruff.lint.mccabe]``) and a per-file
C901 ignore for each file that still holds a function over it, the function named in
the comment after the entry. Per-file ignores alone would let a second function in a
listed file grow unseen, and an entry outlive its function; this test checks the
named functions, both ways, so the list only shrinks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: A listed entry: ``"path" = ["C901"]  # name, name``.
ENTRY = re.compile(r'^"(?P<path>[^"]+)" = \["C901"\]\s*#\s*(?P<names>\S.*)$', re.MULTILINE)
#: ruff's C901 message names the function first.
FUNCTION = re.compile(r"^`(?P<name>[^`]+)` is too complex")


def _listed() -> set[tuple[str, str]]:
    text = (ROOT / "pyproject.toml").read_text()
    return {
        (entry["path"], name.strip())
        for entry in ENTRY.finditer(text)
        for name in entry["names"].split(",")
    }


def _over_the_ceiling() -> set[tuple[str, str]]:
    """Every function over the ceiling, as ruff finds them with no file ignored."""
    command = [sys.executable, "-m", "ruff", "check", "--select", "C901", "--no-cache"]
    command += ["--config", "lint.per-file-ignores = {}", "--output-format", "json", "."]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert run.returncode in (0, 1), run.stderr
    found = set()
    for diagnostic in json.loads(run.stdout):
        match = FUNCTION.match(diagnostic["message"])
        assert match, diagnostic["message"]
        path = Path(diagnostic["filename"]).relative_to(ROOT).as_posix()
        found.add((path, match["name"]))
    return found


def test_every_c901_ignore_names_its_functions() -> None:
    ignores = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    ignored = {path for path, codes in ignores["per-file-ignores"].items() if "C901" in codes}
    assert ignored == {path for path, _ in _listed()}


def test_complexity_only_goes_down() -> None:
    over, listed = _over_the_ceiling(), _listed()
    assert sorted(over - listed) == [], "over the ceiling: split it into named steps"
    assert sorted(listed - over) == [], "no longer over the ceiling: take it off the list"
