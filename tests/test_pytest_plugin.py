"""The pytest plugin, used as an agent author uses it: a project of their own, run by pytest.

Each test writes a small project into a temporary directory and runs pytest on it. The
first runs it in a subprocess, so the plugin is loaded exactly as it is for a user; the
others run it in this process (pytester's ``runpytest_inprocess``, a configuration of its
own with the same plugins loaded), where a second interpreter would only have spent a
few seconds of CPU starting pytest again: the fixtures' daemons and agents are still
processes of their own.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The options every run of an author's project gets (here and in a subprocess alike).
#: `-p mesh.pytest_plugin` loads the plugin whether or not this environment installed the
#: package with its entry point (the entry point carries the same name, so never twice).
OPTIONS = ("-p", "mesh.pytest_plugin", "-p", "no:cacheprovider", "-v")

pytest_plugins = ["pytester"]

AGENT = '''\
from mesh import Agent, run_agent

agent = Agent("greeter", description="Greets people.")


@agent.tool
async def greet(name: str) -> dict[str, str]:
    """Say hello."""
    return {"greeting": f"Hello, {name}."}


if __name__ == "__main__":
    run_agent(agent)
'''

CONFTEST = """\
import pytest

import greeter
from mesh import Agent


@pytest.fixture
def mesh_agent() -> Agent:
    return greeter.agent
"""

TESTS = """\
import pytest
import sniffio

from mesh import InvalidParams
from mesh.pytest_plugin import MeshDaemon

pytestmark = pytest.mark.both_backends


async def test_in_memory(mesh_peer, anyio_backend) -> None:
    assert sniffio.current_async_library() == anyio_backend
    assert await mesh_peer.call_tool("greet", {"name": "Ada"}) == {"greeting": "Hello, Ada."}
    with pytest.raises(InvalidParams, match=r"at `\\$\\.name`"):
        await mesh_peer.call_tool("greet", {"name": 5})


async def test_the_live_echo_agent(mesh_echo) -> None:
    assert await mesh_echo.call_tool("echo", {"message": "hi"}) == {"message": "hi"}


async def test_through_the_daemon(mesh_daemon: MeshDaemon) -> None:
    await mesh_daemon.wait_online("greeter")
    assert mesh_daemon.data_dir.is_dir() and mesh_daemon.url.startswith("http://127.0.0.1:")
    answer = await mesh_daemon.client.call_tool("greeter", "greet", {"name": "Bo"})
    assert answer == {"greeting": "Hello, Bo."}
    with pytest.raises(InvalidParams):
        await mesh_daemon.client.call_tool("greeter", "greet", {"name": 5})
    assert [a["id"] for a in await mesh_daemon.client.agents()] == ["greeter"]


def test_plain_tests_are_left_alone() -> None:
    assert True
"""

MANIFEST = """\
id = "greeter"
[transport]
type = "stdio"
command = "python"
args = ["greeter.py", "--stdio"]
cwd = ".."
"""


def project(
    tmp_path: Path, *, tests: str = TESTS, ini: str = "mesh_manifests = manifests\n"
) -> Path:
    (tmp_path / "greeter.py").write_text(AGENT)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_greeter.py").write_text(tests)
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "greeter.toml").write_text(MANIFEST)
    (tmp_path / "pytest.ini").write_text(f"[pytest]\n{ini}")
    return tmp_path


def pytest_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on the project in ``directory``, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", *OPTIONS, *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=180,
    )


def pytest_here(pytester: pytest.Pytester, *args: str) -> tuple[int, str]:
    """pytest on the project in ``pytester.path``, in this process: its exit code and its
    report."""
    run = pytester.runpytest_inprocess(*OPTIONS, *args)
    return int(run.ret), run.stdout.str()


def test_an_authors_tests_run_on_both_backends_in_memory_live_and_through_a_daemon(
    tmp_path: Path,
) -> None:
    run = pytest_in(project(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    for test in ("test_in_memory", "test_the_live_echo_agent", "test_through_the_daemon"):
        assert f"test_greeter.py::{test}[asyncio] PASSED" in run.stdout
        assert f"test_greeter.py::{test}[trio] PASSED" in run.stdout
    assert "test_greeter.py::test_plain_tests_are_left_alone PASSED" in run.stdout
    assert "7 passed" in run.stdout
    # Python's own bytecode cache aside (written unless PYTHONDONTWRITEBYTECODE is set).
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == [
        "conftest.py",
        "greeter.py",
        "manifests",
        "pytest.ini",
        "test_greeter.py",
    ], "the fixtures write only under temporary directories"


def test_a_missing_mesh_agent_fixture_says_how_to_write_it(pytester: pytest.Pytester) -> None:
    directory = project(pytester.path)
    (directory / "conftest.py").write_text("")
    code, report = pytest_here(pytester, "-k", "in_memory")
    assert code == 1
    assert "define it in your conftest.py" in report
    assert "def mesh_agent() -> Agent:" in report


def test_a_wrong_manifests_directory_is_named(pytester: pytest.Pytester) -> None:
    project(pytester.path, ini="mesh_manifests = nowhere\n")
    code, report = pytest_here(pytester, "-k", "daemon")
    assert code == 1
    assert f"mesh_manifests = 'nowhere': no directory at {pytester.path / 'nowhere'}" in report


MISSING = """\
import pytest

pytestmark = pytest.mark.both_backends


async def test_waits_for_an_agent_with_no_manifest(mesh_daemon) -> None:
    await mesh_daemon.wait_online("greeter")
    await mesh_daemon.wait_online("greeter", "slowpoke", timeout=1)
"""


def test_waiting_for_an_agent_without_a_manifest_says_what_the_daemon_loaded(
    pytester: pytest.Pytester,
) -> None:
    project(pytester.path, tests=MISSING)
    code, report = pytest_here(pytester)
    assert code == 1
    manifests = pytester.path / "manifests"
    said = (
        f"TimeoutError: agent 'slowpoke' not online after 1 s; the daemon loaded 1 manifests "
        f"from {manifests} (greeter.toml); it knows greeter (online) (an agent needs a manifest"
    )
    # Once per backend in the tracebacks; the short summary may repeat it or cut it at the
    # terminal's width, so only the traceback lines (`E   ...`) are counted.
    told = [line for line in report.splitlines() if line.startswith("E ") and said in line]
    assert len(told) == 2, report  # on asyncio and on trio


def test_the_plugin_is_registered_by_the_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    entry_points = pyproject["project"]["entry-points"]["pytest11"]
    assert entry_points == {"mesh.pytest_plugin": "mesh.pytest_plugin"}


DOC_FILE = re.compile(r"^```(?:py|toml|ini)\n# (?P<path>[\w./-]+)\n(?P<body>.*?)^```", re.M | re.S)


def test_the_walkthrough_in_docs_testing_md_goes_green(pytester: pytest.Pytester) -> None:
    """Every file docs/testing.md shows, written out as a project: its tests pass on both loops."""
    files = {
        m["path"]: m["body"] for m in DOC_FILE.finditer((ROOT / "docs/testing.md").read_text())
    }
    assert set(files) == {
        "greeter.py",
        "conftest.py",
        "test_greeter.py",
        "manifests/greeter.toml",
        "pytest.ini",
        "test_daemon.py",
    }
    for path, body in files.items():
        (pytester.path / path).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / path).write_text(body)
    code, report = pytest_here(pytester)
    assert code == 0, report
    assert "6 passed" in report
    assert "test_daemon.py::test_greets_through_the_daemon[trio] PASSED" in report


def test_the_plugins_wait_matches_the_spawn_timeout_of_mesh_testing() -> None:
    from mesh.pytest_plugin import WAIT_ONLINE_TIMEOUT
    from mesh.testing import SPAWN_TIMEOUT

    assert WAIT_ONLINE_TIMEOUT == SPAWN_TIMEOUT
