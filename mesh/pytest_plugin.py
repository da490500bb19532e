"""The mesh's pytest plugin: what an agent author needs to test an agent, ready to use.

Installed with the package and on by default (the ``pytest11`` entry point
``mesh.pytest_plugin``; ``-p no:mesh.pytest_plugin`` turns it off). It gives:

``@pytest.mark.both_backends``
    Run the async test on asyncio and on trio (it implies ``@pytest.mark.anyio``).
    ``pytestmark = pytest.mark.both_backends`` at the top of a module does it for
    every async test there. Both backends are named, so a missing trio fails.

``mesh_agent``
    The :class:`~mesh.Agent` under test. Override it in your ``conftest.py``
    (or the test module) to return yours.

``mesh_peer``
    A :class:`~mesh.Peer` to ``mesh_agent``, served in this process over memory.

``mesh_echo``
    A :class:`~mesh.Peer` to the live echo agent, a child process over stdio.

``mesh_manifests``
    The manifests directory ``mesh_daemon`` loads: the ``mesh_manifests`` ini
    option (relative to the rootdir) if set, else an empty temporary directory.
    Override it to point anywhere.

``mesh_daemon``
    A running ``mesh serve`` on a free loopback port with a temporary data
    directory, as a :class:`MeshDaemon`: ``url``, ``ws``, ``token``, ``data_dir``,
    ``client`` (a :class:`~mesh.testing.DaemonClient` that presents the token)
    and ``wait_online(*ids)``.

The async fixtures need an async test (``both_backends`` or ``anyio``). See
docs/testing.md for a walk from nothing to a green test of your own agent.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

if TYPE_CHECKING:
    from mesh import Agent, Peer
    from mesh.testing import Daemon, DaemonClient

__all__ = ["BACKENDS", "MeshDaemon"]

#: The event loops ``both_backends`` runs a test on.
BACKENDS: Final = ("asyncio", "trio")
MARKER: Final = "both_backends"
#: As ``mesh.testing.SPAWN_TIMEOUT`` (not imported here, so that loading the plugin stays
#: cheap): agents start as child processes, and a loaded CI machine takes its time.
WAIT_ONLINE_TIMEOUT: Final = 60.0


@dataclass(frozen=True, slots=True)
class MeshDaemon:
    """A ``mesh serve`` started for one test, and a client ready to call through it."""

    url: str
    ws: str
    token: str | None
    data_dir: Path
    manifests: Path
    client: DaemonClient
    daemon: Daemon

    async def wait_online(
        self, *agent_ids: str, timeout: float = WAIT_ONLINE_TIMEOUT
    ) -> dict[str, Any]:
        """Until every named agent is online (watching ``/agents/events``, no polling).

        Past ``timeout`` seconds, a :class:`TimeoutError` that says which agents are
        missing, how many manifests the daemon loaded and from where, and what it knows.
        """
        try:
            return await self.daemon.wait_online(*agent_ids, timeout=timeout)
        except TimeoutError:
            why = await self._not_online(agent_ids, timeout)
        raise TimeoutError(why)

    async def _not_online(self, agent_ids: tuple[str, ...], timeout: float) -> str:
        import anyio

        known: dict[str, str] = {}
        with anyio.move_on_after(10):  # a daemon too busy to answer still gets a message
            known = {a["id"]: a["status"] for a in await self.client.agents()}
        missing = [a for a in agent_ids if known.get(a) != "online"]
        names = ", ".join(repr(a) for a in missing) or repr(agent_ids)
        loaded = sorted(path.name for path in self.manifests.glob("*.toml"))
        listed = f" ({', '.join(loaded)})" if loaded else ""
        shown = ", ".join(f"{a} ({status})" for a, status in sorted(known.items()))
        message = (
            f"agent {names} not online after {timeout:g} s; the daemon loaded "
            f"{len(loaded)} manifests from {self.manifests}{listed}; it knows "
            f"{shown or 'no agents'}"
        )
        if any(a not in known for a in missing):
            message += " (an agent needs a manifest there, or must dial in itself)"
        return message


# -- the marker ----------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "mesh_manifests",
        "manifests directory the mesh_daemon fixture loads (relative to the rootdir)",
        default=None,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: run this async test on asyncio and on trio (implies anyio)"
    )


def _marked(collector: pytest.Module | pytest.Class, function: object) -> bool:
    own = getattr(function, "pytestmark", ())
    return collector.get_closest_marker(MARKER) is not None or any(m.name == MARKER for m in own)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(
    collector: pytest.Module | pytest.Class, name: str, obj: object
) -> None:
    # Whichever of this hook and anyio's runs first, the test ends up an anyio test
    # that uses `anyio_backend`, which pytest_generate_tests then parametrizes.
    if (
        collector.istestfunction(obj, name)
        and inspect.iscoroutinefunction(obj)
        and _marked(collector, obj)
    ):
        pytest.mark.anyio(obj)
        pytest.mark.usefixtures("anyio_backend")(obj)


@pytest.hookimpl(tryfirst=True)  # before pytest parametrizes anyio's own fixture
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (
        metafunc.definition.get_closest_marker(MARKER) is not None
        and "anyio_backend" in metafunc.fixturenames
    ):
        # Module scope, as anyio's own fixture, so module-scoped async fixtures work.
        metafunc.parametrize("anyio_backend", BACKENDS, scope="module")


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def mesh_agent() -> Agent:
    """Override me: return the Agent under test."""
    pytest.fail(
        "the mesh_peer fixture serves the agent that the `mesh_agent` fixture returns; define "
        "it in your conftest.py:\n\n"
        "    @pytest.fixture\n"
        "    def mesh_agent() -> Agent:\n"
        "        return my_module.agent\n",
        pytrace=False,
    )


@pytest.fixture
async def mesh_peer(mesh_agent: Agent) -> AsyncIterator[Peer]:
    """A Peer to ``mesh_agent``, served in this process over an in-memory link."""
    from mesh.testing import open_memory_peer

    async with open_memory_peer(mesh_agent) as peer:
        yield peer


@pytest.fixture
async def mesh_echo() -> AsyncIterator[Peer]:
    """A Peer to the live echo agent (``python -m mesh.agents.echo --stdio``)."""
    from mesh.testing import open_echo_agent

    async with open_echo_agent() as peer:
        yield peer


@pytest.fixture
def mesh_manifests(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The manifests directory for ``mesh_daemon`` (override, or set the ini option)."""
    configured = request.config.getini("mesh_manifests")
    if configured:
        path = Path(request.config.rootpath, str(configured))
        if not path.is_dir():
            pytest.fail(f"mesh_manifests = {configured!r}: no directory at {path}", pytrace=False)
        return path
    return tmp_path_factory.mktemp("manifests")


@pytest.fixture
async def mesh_daemon(
    mesh_manifests: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[MeshDaemon]:
    """``mesh serve`` on a free port, ``mesh_manifests`` loaded, a temporary data directory."""
    from mesh.testing import open_daemon_client, spawn_daemon

    data_dir = tmp_path_factory.mktemp("mesh-data")
    args = ["--data-dir", str(data_dir)]
    async with (
        spawn_daemon(mesh_manifests, extra_args=args) as daemon,
        open_daemon_client(daemon.http, token=daemon.token) as client,
    ):
        yield MeshDaemon(
            url=daemon.http,
            ws=daemon.ws,
            token=daemon.token,
            data_dir=data_dir,
            manifests=Path(mesh_manifests),
            client=client,
            daemon=daemon,
        )
