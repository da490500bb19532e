"""The tree is the map: layers point one way and no module imports itself round a cycle.

``transports`` and ``registry`` import nothing of ours; ``mesh`` is wings ranked from the
core up to the programs. An arrow may point down the ranks or stay inside its wing.
A module in no wing fails too, so a new wing is placed on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layers.graph import Wing, cycles, read_graph, wrong_arrows

ROOT = Path(__file__).resolve().parent.parent

WINGS = (
    Wing("transports", 0),
    Wing("registry", 0),
    # the core: errors, wire types and small pure helpers everything may use
    Wing("mesh._errors", 1),
    Wing("mesh._public", 1),
    Wing("mesh._backoff", 1),
    Wing("mesh._logging", 1),
    Wing("mesh._gc", 1),
    Wing("mesh._text", 1),
    Wing("mesh.protocol", 2),
    Wing("mesh.providers", 3),
    Wing("mesh._rpc", 4),
    Wing("mesh._sdk", 5),
    Wing("mesh.manifests", 5),
    Wing("mesh._daemon_client", 5),  # the daemon's HTTP API from outside: tests and scripts
    Wing("mesh._orchestrator", 6),
    Wing("mesh.rooms", 7),
    # MCP both ways: serving needs the orchestrator; `mesh` imports it to register "mcp"
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


@pytest.fixture(scope="module")
def graph() -> dict[str, frozenset[str]]:
    return read_graph(ROOT, ["mesh", "transports", "registry"])


def test_no_import_cycles(graph: dict[str, frozenset[str]]) -> None:
    assert cycles(graph) == []


def test_every_arrow_points_down_the_wings(graph: dict[str, frozenset[str]]) -> None:
    assert wrong_arrows(graph, WINGS) == []


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
