"""Start-up pays only for what it uses: ``import mesh`` and the ``mesh`` command stay light.

Each check runs in a fresh interpreter (the test process has imported everything), and
reads ``sys.modules`` there. The protocols a manifest names still load when it names
them: the wing that serves one is imported by the loader, not by ``import mesh``.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mesh
from tests.mcp._peers import ROOT, mcp_server_command

#: The wings a plain ``import mesh`` must not load (each costs start-up or side effects).
HEAVY = (
    "mesh._orchestrator",
    "mesh._rpc",
    "mesh._sdk",
    "mesh._telemetry",
    "mesh.a2a",
    "mesh.cluster",
    "mesh.daemon",
    "mesh.manifests",
    "mesh.mcp",
    "mesh.providers",
    "mesh.rooms",
    "transports",
    "registry",
    "httpx",
    "structlog",
    "anyio",
    "msgspec",
)
#: What the ``mesh`` command may not load before it knows which subcommand runs.
CLI_HEAVY = (
    "mesh._orchestrator",
    "mesh._rpc",
    "mesh.a2a",
    "mesh.cluster",
    "mesh.daemon",
    "mesh.mcp",
    "mesh.providers",
    "mesh.rooms",
    "httpx",
    "structlog",
    "urllib.request",  # the client commands' HTTP client loads with their first request
)

#: What a process that only reads rooms or manifests (``mesh room …``, a persona's
#: manifest) must not load: ``mesh.rooms`` and ``mesh.providers`` load their names on use.
ROOMS_ENGINE = (
    "mesh.rooms._engine",
    "mesh.rooms._manager",
    "mesh.rooms._store",
    "mesh.providers._factory",
    "mesh.providers._http",
)
#: The packages whose public names load on first use, each with its table of where.
LAZY_PACKAGES = (
    "mesh",
    "mesh.manifests",
    "mesh.mcp",
    "mesh.providers",
    "mesh.rooms",
    "registry",
    "transports",
)


def _loaded(code: str, *, timeout: float = 60) -> list[str]:
    """The modules a fresh interpreter holds after running ``code`` (it prints nothing)."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def _under(modules: list[str], roots: tuple[str, ...]) -> set[str]:
    return {m for m in modules if any(m == root or m.startswith(f"{root}.") for root in roots)}


def test_import_mesh_loads_none_of_the_wings() -> None:
    assert _under(_loaded("import mesh"), HEAVY) == set()


def test_a_public_name_loads_its_own_wing_only() -> None:
    loaded = _loaded("from mesh import Agent; assert repr(Agent) == \"<class 'mesh.Agent'>\"")
    assert "mesh._sdk.agent" in loaded
    assert _under(loaded, ("mesh.mcp", "mesh.a2a", "mesh.daemon", "mesh.cluster")) == set()


@pytest.mark.parametrize(
    ("argv", "unneeded"),
    [
        (["--version"], CLI_HEAVY),
        (["--help"], CLI_HEAVY),
        (["call", "--help"], CLI_HEAVY),
        (["token", "list", "--help"], CLI_HEAVY),
        # its help names the rooms' default limits: the rooms wing, not the daemon's others
        (["room", "run", "--help"], ("mesh.a2a", "mesh.cluster", "mesh.daemon", "mesh.mcp")),
        # a room client reads events and specs: not the engine, the manager or a provider
        (["room", "list", "--help"], ROOMS_ENGINE),
    ],
)
def test_the_mesh_command_loads_only_what_it_runs(
    argv: list[str], unneeded: tuple[str, ...]
) -> None:
    code = f"""
import contextlib, io, sys
from mesh.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main({argv!r})
"""
    assert _under(_loaded(code), unneeded) == set()


#: What a command that only makes HTTP requests to the daemon must not load: an async HTTP
#: client (httpx's httpcore imports trio and anyio), structlog (no library code of its logs),
#: OpenTelemetry (nobody asked for traces), the daemon's side (its token store), or what
#: another command alone uses.
HTTP_COMMAND_HEAVY = (
    "httpx",
    "httpcore",
    "trio",
    "structlog",
    "opentelemetry",
    "mesh._telemetry.tracing",
    "mesh.daemon",
    "webbrowser",  # `mesh mcp login` opens one; with it, subprocess and shutil
)
#: What a room client that reads rooms must not load besides: the WebSocket and the
#: follower of ``mesh room run`` and ``watch``, the console of ``mesh room join``.
ROOM_FOLLOWING = ("websockets", "transports._websocket", "mesh.cli._follow", "mesh.cli._join")
#: What a room client that decodes rooms must not load for the types a room names (its
#: members' ids, who made it): the registry's table and driver, the manifest loader, anyio.
ROOM_TYPES_ONLY = ("registry._table", "registry._driver", "mesh.manifests._load", "anyio")


@pytest.mark.parametrize(
    ("argv", "unneeded"),
    [
        (["agents"], (*HTTP_COMMAND_HEAVY, "anyio")),
        (["call", "echo", "echo", "--arg", "message=hi"], (*HTTP_COMMAND_HEAVY, "anyio")),
        (["token", "list"], (*HTTP_COMMAND_HEAVY, "anyio")),
        (["room", "list"], (*HTTP_COMMAND_HEAVY, *ROOM_FOLLOWING, *ROOMS_ENGINE, *ROOM_TYPES_ONLY)),
        (
            ["room", "show", "r1"],
            (*HTTP_COMMAND_HEAVY, *ROOM_FOLLOWING, *ROOMS_ENGINE, *ROOM_TYPES_ONLY),
        ),
    ],
)
def test_a_command_that_makes_http_requests_loads_only_its_client(
    argv: list[str], unneeded: tuple[str, ...]
) -> None:
    """The whole command runs, to its request (to a closed port: exit 3)."""
    code = f"""
import contextlib, io
from mesh.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        main([*{argv!r}, "--url", "http://127.0.0.1:9"])
    except SystemExit as exit_:
        assert exit_.code == 3, err.getvalue()
assert "cannot reach the daemon" in err.getvalue(), err.getvalue()
"""
    assert _under(_loaded(code), unneeded) == set()


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_the_lazy_names_are_the_ones_type_checkers_see(package: str) -> None:
    """A lazy package's ``TYPE_CHECKING`` imports and its table of lazy names agree."""
    module = importlib.import_module(package)
    tree = ast.parse(Path(str(module.__file__)).read_text())
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    seen = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert seen == module._WHERE
    assert set(seen) <= set(module.__all__)
    assert set(module.__all__) <= set(seen) | set(vars(module)), "a public name is nowhere"


def test_a_manifest_loads_no_provider() -> None:
    """A manifest names a persona's provider by its settings; the providers load on use."""
    assert _under(_loaded("import mesh.manifests"), (*ROOMS_ENGINE, "httpx")) == set()


def test_a_scripted_persona_loads_no_http_provider() -> None:
    """A persona agent loads its provider when its manifest names one: a scripted persona
    (every offline room, every room of the suite) starts without httpx and the HTTP clients."""
    code = """
from mesh.agents.persona import create_provider
from mesh.providers import ProviderConfig
create_provider(ProviderConfig(provider="scripted", script=["hi"]))
"""
    loaded = _loaded(code)
    assert "mesh.providers._scripted" in loaded
    http = ("httpx", "mesh.providers._http", "mesh.providers._openai", "mesh.providers._ollama")
    assert _under(loaded, http) == set()


def test_a_transport_loads_alone() -> None:
    """``transports`` loads each transport on use: a frame-size bound is not a WebSocket."""
    loaded = _loaded("from transports import DEFAULT_MAX_FRAME_SIZE, memory_stream_pair")
    assert _under(loaded, ("websockets", "h11", "httpx", "transports._http_server")) == set()


@pytest.mark.parametrize(
    ("package", "name"),
    [
        ("mesh.rooms", "RoomManager"),
        ("mesh.mcp", "ToolCatalog"),
        ("mesh.providers", "ScriptedProvider"),
        ("mesh.manifests", "Manifest"),
        ("registry", "Registry"),
        ("transports", "WebSocketStream"),
    ],
)
def test_a_lazy_name_loads_published_and_listed(package: str, name: str) -> None:
    code = f"""
import {package} as package
assert {name!r} in dir(package) and "{package}._" + "x" not in dir(package)
from {package} import {name}
assert {name}.__module__ == {package!r}, {name}.__module__
try:
    package.Nope
except AttributeError as exc:
    assert "no attribute 'Nope'" in str(exc), exc
else:
    raise AssertionError("an unknown name was found")
"""
    _loaded(code)


def test_dir_lists_every_public_name_before_it_is_used() -> None:
    listed = _loaded("import mesh; assert set(mesh.__all__) <= set(dir(mesh)), dir(mesh)")
    assert "mesh._rpc.peer" not in listed


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        mesh.Nope  # noqa: B018


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_mcp_manifest_mounts_in_a_process_that_never_imported_mesh_mcp(
    backend: str, tmp_path: Path
) -> None:
    command, args = mcp_server_command()
    (tmp_path / "peer.toml").write_text(
        f"""id = "peer"
[transport]
type = "stdio"
command = {json.dumps(command)}
args = {json.dumps(args)}
protocol = "mcp"
env = {{ PYTHONPATH = {json.dumps(str(ROOT))} }}
"""
    )
    script = textwrap.dedent(
        f"""
        import sys, anyio
        from mesh import MeshOrchestrator
        assert "mesh.mcp" not in sys.modules, "imported before any manifest named it"

        async def main():
            async with MeshOrchestrator.from_manifests({str(tmp_path)!r}) as orchestrator:
                with anyio.fail_after(60):
                    async with orchestrator.registry.subscribe() as changes:
                        if not orchestrator.agents():
                            async for _ in changes:
                                if orchestrator.agents():
                                    break
                    await anyio.wait_all_tasks_blocked()
                    me = orchestrator.as_embedder()
                    print(await me.call_tool("peer", "add", {{"a": 2, "b": 3}}))

        anyio.run(main, backend={backend!r})
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "{'result': 5}"


def test_an_a2a_manifest_links_in_a_process_that_never_imported_mesh_a2a(tmp_path: Path) -> None:
    (tmp_path / "remote.toml").write_text(
        'id = "remote"\n[transport]\ntype = "http"\nendpoint = "http://127.0.0.1:9"\n'
        'protocol = "a2a"\n'
    )
    code = f"""
import sys
from mesh._orchestrator.links import links_from_manifests
assert "mesh.a2a" not in sys.modules
links = links_from_manifests({str(tmp_path)!r})
assert links.errors == [], links.errors
(spec,) = links.specs
assert spec.connector is not None
"""
    assert "mesh.a2a" in _loaded(code)


@pytest.mark.parametrize(
    "module", ["mesh.daemon._serve", "mesh._orchestrator.orchestrator", "mesh.daemon"]
)
def test_a_daemon_or_an_orchestrator_loads_no_a2a_until_asked(module: str) -> None:
    """The A2A wing loads on a daemon's first ``/a2a`` request, or for a manifest that
    says ``protocol = "a2a"`` (above): a daemon nobody asks over A2A never pays for it."""
    assert _under(_loaded(f"import {module}"), ("mesh.a2a",)) == set()


def test_a_daemon_loads_the_mcp_server_without_the_mcp_client() -> None:
    """The daemon serves ``/mcp``; mounting MCP servers (httpx, OAuth) loads with a
    manifest that says ``protocol = "mcp"`` (above)."""
    loaded = _loaded("import mesh.daemon._serve")
    assert "mesh.mcp._http_server" in loaded
    client = ("mesh.mcp._http", "mesh.mcp._oauth", "mesh.mcp._mount", "httpx")
    assert _under(loaded, client) == set()


def test_mesh_mcp_relays_without_the_orchestrator() -> None:
    """``mesh mcp`` relays stdio to the daemon's ``/mcp``: one starts per MCP client
    session, so it loads neither the orchestrator nor the RPC stack it never runs."""
    code = "import mesh.cli._main, mesh.cli._connection, mesh._logging, mesh.mcp._relay"
    loaded = _loaded(code)
    assert "mesh.mcp._codec" in loaded
    unneeded = ("mesh._orchestrator", "mesh._rpc", "mesh._sdk", "mesh.manifests", "registry")
    mount = ("mesh.mcp._mount",)
    network = ("opentelemetry", "httpx", "h11", "httptools", "transports._http_server")
    assert _under(loaded, (*unneeded, *mount, *network)) == set()


def test_a_stdio_agent_loads_no_network_transport() -> None:
    """An agent served over stdio (the default) loads the HTTP server and WebSocket only
    when its flags ask for them (``--http``, ``--connect``)."""
    loaded = _loaded("import mesh.agents.echo")
    network = ("websockets", "h11", "transports._http_server", "transports._websocket")
    assert _under(loaded, network) == set()
    assert _under(loaded, ("mesh._sdk.serve", "mesh._rpc.connect")) == set()


def test_a_daemon_loads_prometheus_client_on_its_first_scrape() -> None:
    assert _under(_loaded("import mesh.daemon._serve"), ("prometheus_client",)) == set()


def test_the_library_loads_structlog_only_when_the_process_configures_it() -> None:
    """Library loggers look structlog up; the application's ``configure_logging`` imports it."""
    quiet = _loaded("import mesh._rpc.peer, mesh.rooms._events, registry, transports")
    assert _under(quiet, ("structlog",)) == set()
    configured = _loaded("from mesh._logging import configure_logging; configure_logging()")
    assert "structlog" in configured
    # structlog would import rich (installed here) for tracebacks the console renders plain
    assert _under(configured, ("rich",)) == set()


def test_an_http_client_loads_no_command_line_client() -> None:
    """``import httpx`` in a process of the library leaves httpx's CLI (click, pygments,
    rich: installed here) unloaded."""
    loaded = _loaded("import mesh.testing._daemon_client, httpx; httpx.AsyncClient()")
    assert "httpx" in loaded
    assert _under(loaded, ("click", "pygments", "rich")) == set()


def test_httpx_own_command_line_client_still_works_beside_the_library() -> None:
    """What httpx offers of its CLI (``httpx.main``, ``httpx._main`` and its names) loads
    on use, as itself."""
    code = """
import contextlib, io, sys
import mesh, httpx
from httpx import main
assert "click" not in sys.modules
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    main(["--help"])
assert "Usage: httpx" in out.getvalue(), out.getvalue()
import httpx._main
assert httpx._main is sys.modules["httpx._main"] and hasattr(httpx._main, "print_response")
from httpx._main import print_response
assert print_response.__module__ == "httpx._main"
"""
    assert "click" in _loaded(code)


def test_a_process_that_imported_httpx_first_keeps_it_as_it_was() -> None:
    code = "import httpx, mesh, sys; assert httpx.main is sys.modules['httpx._main'].main"
    loaded = _loaded(code)
    assert "click" in loaded
