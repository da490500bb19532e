"""Library code is silent: nothing on stdout, no log events until the application asks.

structlog's unconfigured default prints every event to stdout; the README's first
example used to print ``[debug] agent.spawned …`` before its answer.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIRST_EXAMPLE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "example.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def test_the_readme_example_prints_exactly_what_the_readme_says(tmp_path: Path) -> None:
    match = FIRST_EXAMPLE.search((ROOT / "README.md").read_text())
    assert match is not None
    code = match.group(1)
    promised = re.search(r"print\(.*\)\s+# (.+)$", code, re.MULTILINE)
    assert promised is not None, "the README's first example says what it prints in a comment"
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == promised.group(1) + "\n"
    assert result.stderr == ""


def test_library_loggers_are_silent_until_structlog_is_configured(tmp_path: Path) -> None:
    code = """
import io, structlog
from mesh._logging import get_logger
from registry._logging import get_logger as registry_logger

get_logger("mesh.test").warning("before", n=1)
registry_logger("registry.test").error("before")
out = io.StringIO()
structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=out))
get_logger("mesh.test").warning("after", n=2)
registry_logger("registry.test").info("after too")
print(repr(out.getvalue()))
"""
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "before" not in result.stdout + result.stderr
    logged = result.stdout
    assert "after" in logged and "n=2" in logged and "after too" in logged
    assert result.stderr == ""


def test_a_persona_agent_starts_without_warnings(tmp_path: Path) -> None:
    """``python -m mesh.agents.persona`` once warned that the module was already imported."""
    result = subprocess.run(
        [sys.executable, "-W", "error", "-m", "mesh.agents.persona", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr
    assert "--provider" in result.stdout


def test_library_code_logs_only_through_the_quiet_loggers() -> None:
    """``structlog.get_logger`` straight would print to stdout before configuration."""
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("mesh", "transports", "registry")
        for path in (ROOT / package).rglob("*.py")
        if path.name != "_logging.py" and "structlog.get_logger(" in path.read_text()
    ]
    assert offenders == [], "use mesh._logging.get_logger (or the package's _logging)"
