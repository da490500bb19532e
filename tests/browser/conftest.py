"""Browser tests: the room page in a real headless Chromium, against a real ``mesh serve``.

Chromium is Debian's (``scripts/ensure-browser.sh`` installs it; ``make test`` runs
that first) and Playwright drives it through ``executable_path``: nothing is ever
downloaded by Playwright. Without a ``chromium`` on PATH these tests are skipped
with the reason, unless ``MESH_REQUIRE_BROWSER=1`` (set by ``make test``) makes
that a failure.

The tests are synchronous (Playwright's sync API); the daemon they drive runs
in its own process on asyncio or trio, and the main flow runs on both.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import sync_playwright

from tests.integration._daemon import persona_manifest

#: Starting the daemon and its two persona processes on a loaded machine.
SPAWN_TIMEOUT = 30.0
#: Where screenshots go when MESH_SCREENSHOTS names a folder (docs/images for the docs).
SCREENSHOTS = os.environ.get("MESH_SCREENSHOTS")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@dataclass
class LiveDaemon:
    url: str
    process: subprocess.Popen[bytes]
    data_dir: Path
    token: str | None = None
    command: tuple[str, ...] = ()  # how it was started, to start it again on its port
    agents: tuple[str, ...] = ()

    def page_url(self, fragment: str = "") -> str:
        return f"{self.url}/#{fragment}" if fragment else f"{self.url}/"

    def env(self) -> dict[str, str]:
        """The environment for a ``mesh`` CLI subprocess on this daemon."""
        return {**os.environ, "MESH_URL": self.url, "MESH_TOKEN": self.token or ""}


def _announcement(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The daemon's first stdout line, read on a thread so the wait has a deadline."""
    found: list[bytes] = []
    assert process.stdout is not None
    stdout = process.stdout
    reader = threading.Thread(target=lambda: found.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(SPAWN_TIMEOUT)
    if not found or not found[0]:
        raise RuntimeError(f"mesh serve did not announce itself within {SPAWN_TIMEOUT} s")
    announced: dict[str, Any] = json.loads(found[0])
    return announced


def wait_online(url: str, *agent_ids: str, token: str | None = None, ca: str | None = None) -> None:
    """Until the named agents are online, watching /agents/events (no polling)."""
    from websockets.sync.client import connect

    ws = "ws" + url.removeprefix("http") + "/agents/events"
    if token:
        ws += f"?token={token}"
    tls = ssl.create_default_context(cafile=ca) if ca else None
    status: dict[str, str] = {}
    with connect(ws, open_timeout=SPAWN_TIMEOUT, ssl=tls) as events:
        while not all(status.get(a) == "online" for a in agent_ids):
            event = json.loads(events.recv(timeout=SPAWN_TIMEOUT))
            shown = event["agents"] if event["type"] == "snapshot" else [event["agent"]]
            status.update((agent["id"], agent["status"]) for agent in shown)


def _admin_token(data_dir: Path) -> str | None:
    """The token a daemon with authentication writes on first start, if this one does."""
    for name in ("admin.token", "admin-token"):
        path = data_dir / name
        if path.exists():
            return path.read_text().strip()
    return None


ECHO_MANIFEST = """\
id = "echo"
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio"]
"""


#: The daemon's log (JSON lines, info and up), beside its data directory: a failed test
#: shows its tail (see ``pytest_runtest_makereport``), so a failure on a loaded CI machine
#: can be read, not only rerun.
DAEMON_LOG = "daemon.log"
#: How much of it a failed test shows.
LOG_TAIL = 80


def _spawn(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=sink)


def log_tail(daemon: LiveDaemon, lines: int = LOG_TAIL) -> str:
    """The last ``lines`` of ``daemon``'s log ("" if it wrote none)."""
    path = daemon.data_dir.parent / DAEMON_LOG
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that had a daemon shows the tail of the daemon's log."""
    report = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        # A test's daemon can come in under two fixtures (the shared one, and the one
        # that clears it): its log is shown once.
        daemons = {value.url: value for value in funcargs.values() if isinstance(value, LiveDaemon)}
        for daemon in daemons.values():
            report.sections.append((f"daemon log, last {LOG_TAIL} lines", log_tail(daemon)))
    return report


def start_daemon(
    tmp_path: Path,
    scripts: dict[str, tuple[str, str, list[str]]],
    *,
    backend: str,
    delay: float,
    extra_args: tuple[str, ...] = (),
    ca: str | None = None,
    tools: bool = False,
    manifests_too: dict[str, str] | None = None,
) -> LiveDaemon:
    """``tools``: the echo agent too (tools only, so not a room member); ``manifests_too``:
    more agents, each id's manifest as text."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    for agent_id, (name, role, script) in scripts.items():
        persona_manifest(manifests, agent_id, name, script, delay, role=role)
    if tools:
        (manifests / "echo.toml").write_text(ECHO_MANIFEST)
    for agent_id, text in (manifests_too or {}).items():
        (manifests / f"{agent_id}.toml").write_text(text)
    data_dir = tmp_path / "data"
    command = [sys.executable, "-m", "mesh.cli", "serve", "--port", "0"]
    command += ["--manifests", str(manifests), "--data-dir", str(data_dir)]
    command += ["--backend", backend, "--log-format", "json", "--log-level", "info"]
    command += extra_args
    agents = (*scripts, *(["echo"] if tools else []), *(manifests_too or {}))
    process = _spawn(command, tmp_path / DAEMON_LOG)
    try:
        url = _announcement(process)["http"]
        daemon = LiveDaemon(url, process, data_dir, _admin_token(data_dir), tuple(command), agents)
        wait_online(url, *agents, token=daemon.token, ca=ca)
    except BaseException:
        _stop(process)
        raise
    return daemon


def start_again(daemon: LiveDaemon) -> None:
    """Start a stopped ``daemon`` again on the same port and data: a running room resumes."""
    port = daemon.url.rsplit(":", 1)[1]
    command = list(daemon.command)
    command[command.index("--port") + 1] = port
    daemon.process = _spawn(command, daemon.data_dir.parent / DAEMON_LOG)
    _announcement(daemon.process)
    wait_online(daemon.url, *daemon.agents, token=daemon.token)


def remove_every_room(daemon: LiveDaemon) -> None:
    """Stop and delete every room: a daemon shared by tests is then as a fresh one is
    (tokens stay: each test names its own)."""
    headers = {"authorization": f"Bearer {daemon.token}"} if daemon.token else {}
    with httpx.Client(base_url=daemon.url, headers=headers, timeout=20) as http:
        listed = http.get("/rooms")
        assert listed.status_code == 200, listed.text
        for room in listed.json()["rooms"]:
            room_id = room["room"]["id"]
            stopped = http.post(f"/rooms/{room_id}/stop")
            assert stopped.status_code == 200, stopped.text
            deleted = http.delete(f"/rooms/{room_id}")
            assert deleted.status_code == 204, deleted.text


def stop_daemon(daemon: LiveDaemon) -> None:
    _stop(daemon.process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


# Module-scoped: Playwright's sync API runs an asyncio loop on this thread while it is
# open, and the async tests that follow must find none running.
@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    executable = shutil.which("chromium")
    if executable is None:
        if os.environ.get("MESH_REQUIRE_BROWSER") == "1":
            pytest.fail("no chromium on PATH: run scripts/ensure-browser.sh (make test does)")
        pytest.skip("no chromium on PATH (scripts/ensure-browser.sh installs it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"the page raised: {errors}"


#: axe-core, installed with the npm peers (tests/mcp/peers, `make peers`).
AXE = Path(__file__).resolve().parents[1] / "mcp" / "peers" / "node_modules" / "axe-core"
#: The WCAG 2.2 AA rules (and those of the versions it builds on).
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]


def serious_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical WCAG 2.2 AA violations on the page as it is now.

    The page's context must bypass its Content-Security-Policy, which (rightly) runs no
    script but the daemon's own.
    """
    script = AXE / "axe.min.js"
    if not script.exists():
        pytest.fail(f"no {script}: run `make peers` (tests/mcp/peers/package.json has axe-core)")
    page.add_script_tag(path=str(script))
    found: list[dict[str, Any]] = page.evaluate(
        """async (tags) => {
            const result = await axe.run(document, { runOnly: { type: "tag", values: tags } });
            return result.violations.map((v) => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map((n) => n.target.join(" ")),
            }));
        }""",
        WCAG_TAGS,
    )
    return [v for v in found if v["impact"] in ("serious", "critical")]


def screenshot(page: Any, name: str) -> None:
    """Save a screenshot for the docs when MESH_SCREENSHOTS names a folder."""
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"))
