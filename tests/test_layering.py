"""The tree is the map: layers point one way and no module imports itself round a cycle.

``transports`` and ``registry`` import nothing of ours; ``mesh`` is wings ranked from the
core up to the programs. An arrow may point down the ranks or stay inside its wing.
A module in no wing fails too, so a new wing is placed on purpose. ``mesh/`` keeps at
most :data:`MAX_FLAT` flat modules; a thirteenth goes into the wing it belongs to.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layers.graph import Wing, cycles, read_graph, too_many_flat, wrong_arrows

ROOT = Path(__file__).resolve().parent.parent

#: Files ``mesh/*.py``, counted whole: ``__init__.py`` and the public ``protocol.py`` and
#: ``pytest_plugin.py`` take their places like any other.
MAX_FLAT = 12

WINGS = (
    Wing("transports", 0),
    Wing("registry", 0),
    # the core: errors, wire types and small pure helpers everything may use
    Wing("mesh._errors", 1),
    Wing("mesh._public", 1),
    Wing("mesh._backoff", 1),
    Wing("mesh._logging", 1),
    Wing("mesh._text", 1),
    Wing("mesh._input", 1),  # reading client input: JSON errors, whole numbers
    Wing("mesh._tasks", 1),
    Wing("mesh._nats_settings", 1),  # the NATS knobs the daemon reads and the cluster takes
    # the process's tallies and its spans (spans use the tallies' status names): the error codes
    Wing("mesh._telemetry", 2),
    Wing("mesh.protocol", 2),
    Wing("mesh.content", 2),  # content items a tool may return: plain structs
    Wing("mesh.providers", 3),
    Wing("mesh._rpc", 4),
    Wing("mesh._sdk", 5),
    Wing("mesh.manifests", 5),
    Wing("mesh._orchestrator", 6),
    Wing("mesh.rooms", 7),
    # MCP both ways: serving needs the orchestrator; `mesh` names it among its subpackages
    Wing("mesh.mcp", 7),
    # A2A both ways: the same place as MCP, for the same reasons
    Wing("mesh.a2a", 7),
    Wing("mesh", 8, package=False),  # the curated public surface
    Wing("mesh.agents", 9),
    Wing("mesh.cluster", 9),  # many daemons over NATS: above rooms, below the daemon
    Wing("mesh.testing", 10),
    Wing("mesh.daemon", 10),
    Wing("mesh.cli", 11),
    Wing("mesh.pytest_plugin", 11),  # fixtures over mesh.testing
    Wing("mesh.demo", 12),
)

#: Inside ``mesh.rooms``, by rank (an import may point to the same rank or lower): the pure
#: core, the engine and its record, the bridge to the mesh, then the manager's collaborators
#: over the table of rooms in memory, its face, and the package's public names.
ROOMS = {
    **dict.fromkeys(
        (
            "_errors",
            "_model",
            "_events",
            "_state",
            "_policy",
            "_rules",
            "_budget",
            "_draws",
            "_perspective",
        ),
        1,
    ),
    **dict.fromkeys(("_roles", "_render", "_people", "_questions", "_replica", "_observe"), 1),
    **dict.fromkeys(("_engine", "_store", "_observers"), 2),
    "_mesh": 3,
    "_manager._table": 4,
    "_manager._engines": 5,
    **dict.fromkeys(
        ("_manager._catalog", "_manager._seats", "_manager._replica_port", "_manager._following"),
        6,
    ),
    "_manager._facade": 7,
    "_manager": 8,
    "": 9,
}

#: ``mesh.testing``: single-purpose helpers that share only the process plumbing and the
#: recorder (none imports another), the daemon's HTTP API from outside, and the package
#: that gathers their names.
TESTING = {
    "_process": 1,
    "_recorder": 1,
    "_daemon_client": 1,
    **dict.fromkeys(("_echo", "_memory", "_dial_in", "_daemon", "_nats"), 2),
    "": 3,
}


def ranked_arrows(
    graph: dict[str, frozenset[str]], package: str, ranks: dict[str, int]
) -> list[str]:
    """Inside ``package``: modules missing from ``ranks``, and arrows to a higher rank, or
    sideways between two modules of the same rank above the lowest."""

    def rank(module: str) -> int | None:
        return ranks.get(module.removeprefix(package).removeprefix("."))

    problems = []
    for source, targets in sorted(graph.items()):
        if source != package and not source.startswith(package + "."):
            continue
        here = rank(source)
        if here is None:
            problems.append(f"{source} has no rank: add it to the map in test_layering.py")
            continue
        for target in sorted(t for t in targets if t.startswith(package + ".")):
            there = rank(target)
            if there is not None and (there > here or (there == here and here > 1)):
                problems.append(f"{source} (rank {here}) imports {target} (rank {there})")
    return problems


@pytest.fixture(scope="module")
def graph() -> dict[str, frozenset[str]]:
    return read_graph(ROOT, ["mesh", "transports", "registry"])


def test_no_import_cycles() -> None:
    # Imports under TYPE_CHECKING count: there, a cycle is hidden, not broken.
    assert cycles(read_graph(ROOT, ["mesh", "transports", "registry"], type_checking=True)) == []


def test_mesh_keeps_few_flat_modules() -> None:
    assert too_many_flat(ROOT / "mesh", MAX_FLAT) == []


def test_every_arrow_points_down_the_wings(graph: dict[str, frozenset[str]]) -> None:
    assert wrong_arrows(graph, WINGS) == []


@pytest.mark.parametrize(("package", "ranks"), [("mesh.rooms", ROOMS), ("mesh.testing", TESTING)])
def test_inside_a_package_the_arrows_point_down_too(
    graph: dict[str, frozenset[str]], package: str, ranks: dict[str, int]
) -> None:
    assert ranked_arrows(graph, package, ranks) == []


def test_the_lower_packages_import_nothing_of_ours(graph: dict[str, frozenset[str]]) -> None:
    for source, targets in graph.items():
        top = source.split(".")[0]
        if top in ("transports", "registry"):
            assert {t.split(".")[0] for t in targets} <= {top}, (source, targets)


# -- the checker itself fails where it should ---------------------------------------


def test_the_checker_finds_a_cycle() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_checker_finds_an_upward_arrow_and_a_stray_module() -> None:
    wings = (Wing("p.low", 1), Wing("p.high", 2), Wing("p", 3, package=False))
    graph = {
        "p.low.x": frozenset({"p.high.y"}),  # up: wrong
        "p.high.y": frozenset({"p.low.x", "p"}),  # down: fine; to p (rank 3): wrong
        "p": frozenset({"p.high.y"}),
        "p.stray": frozenset(),
    }
    assert wrong_arrows(graph, wings) == [
        "p.high.y (p.high, rank 2) imports p (p, rank 3)",
        "p.low.x (p.low, rank 1) imports p.high.y (p.high, rank 2)",
        "p.stray belongs to no wing: add it to the map in test_layering.py",
    ]


def test_the_checker_reads_lazy_imports_but_not_type_checking_ones(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg import b\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n"
    )
    (package / "c.py").write_text("from . import a\nfrom .b import TYPE_CHECKING\n")
    graph = read_graph(tmp_path, ["pkg"])
    assert graph == {
        "pkg": frozenset(),
        "pkg.a": frozenset({"pkg.b"}),
        "pkg.b": frozenset(),
        "pkg.c": frozenset({"pkg.a", "pkg.b"}),
    }
    assert read_graph(tmp_path, ["pkg"], type_checking=True)["pkg.b"] == frozenset({"pkg.a"})


def test_the_checker_finds_a_cycle_hidden_under_type_checking(tmp_path: Path) -> None:
    # The shape transports had: admission named the server's request type for one
    # annotation, and the server imports admission.
    package = tmp_path / "transports"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_admission.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from transports._http_server import HttpRequest\n"
    )
    (package / "_http_server.py").write_text("from transports._admission import Admission\n")
    assert cycles(read_graph(tmp_path, ["transports"])) == []
    assert cycles(read_graph(tmp_path, ["transports"], type_checking=True)) == [
        ["transports._admission", "transports._http_server"]
    ]


def test_the_checker_counts_flat_modules(tmp_path: Path) -> None:
    package = tmp_path / "mesh"
    (package / "_rpc").mkdir(parents=True)
    (package / "_rpc" / "session.py").write_text("")  # in a wing: not flat
    # the flat modules mesh/ held before they moved into their wings: 15
    before = ["__init__", "protocol", "pytest_plugin", "_errors", "_public", "_backoff"]
    before += ["_logging", "_gc", "_text", "_input", "_tasks", "_nats_settings"]
    before += ["_metrics", "_tracing", "_daemon_client"]
    for name in before[:MAX_FLAT]:
        (package / f"{name}.py").write_text("")
    assert too_many_flat(package, MAX_FLAT) == []
    (package / "_metrics.py").write_text("")
    assert too_many_flat(package, MAX_FLAT) == [
        "mesh/ holds 13 flat modules, at most 12: move one into the wing it belongs to "
        "(__init__.py, _backoff.py, _errors.py, _gc.py, _input.py, _logging.py, _metrics.py, "
        "_nats_settings.py, _public.py, _tasks.py, _text.py, protocol.py, pytest_plugin.py)"
    ]
    for name in before[MAX_FLAT:]:
        (package / f"{name}.py").write_text("")
    assert too_many_flat(package, MAX_FLAT)[0].startswith("mesh/ holds 15 flat modules")


def test_the_ranked_checker_finds_an_upward_a_sideways_and_an_unranked_module() -> None:
    graph = {
        "p": frozenset({"p._a"}),
        "p._a": frozenset({"p._b", "p._c", "q"}),  # sideways to _b: wrong; up to _c: wrong
        "p._b": frozenset({"p._low", "p._low2"}),
        "p._c": frozenset(),
        "p._low": frozenset({"p._low2"}),  # sideways at the lowest rank: fine
        "p._low2": frozenset(),
        "p._stray": frozenset(),
        "q": frozenset({"p._c"}),  # outside the package: not its business
    }
    ranks = {"": 4, "_a": 2, "_b": 2, "_c": 3, "_low": 1, "_low2": 1}
    assert ranked_arrows(graph, "p", ranks) == [
        "p._a (rank 2) imports p._b (rank 2)",
        "p._a (rank 2) imports p._c (rank 3)",
        "p._stray has no rank: add it to the map in test_layering.py",
    ]
