"""The import graph of our packages, read from the source, and the two rules it must keep.

Every ``import`` and ``from ... import`` counts, wherever it stands (a lazy import in a
function is still an arrow). One under ``if TYPE_CHECKING:`` never runs, so the wings'
arrows skip it; but it still ties two modules together, so cycles are looked for with it
(``type_checking=True``): putting one half of a cycle under ``TYPE_CHECKING`` hides it, it does
not break it.
A module belongs to a *wing*; wings are ranked, and an arrow may only point to a lower
rank or stay inside its own wing. Cycles are found between modules (Tarjan's SCC).
A package keeps few flat modules (``*.py`` right in its folder, ``__init__.py`` too):
the rest sit in its wings, so ``ls`` shows the architecture.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

Graph = Mapping[str, frozenset[str]]


@dataclass(frozen=True, slots=True)
class Wing:
    name: str  # a module or package prefix, e.g. "mesh._rpc"
    rank: int
    #: False: the wing is the one module ``name`` (e.g. ``mesh`` itself, not ``mesh.*``).
    package: bool = True


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_graph(
    root: Path, packages: Sequence[str], *, type_checking: bool = False
) -> dict[str, frozenset[str]]:
    """Module -> the modules of ``packages`` it imports (``type_checking``: under
    ``TYPE_CHECKING`` too)."""
    paths = {module_name(root, p): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    graph: dict[str, frozenset[str]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        targets = set()
        tree = ast.parse(path.read_text(), str(path))
        for base, names in _imports(tree, name, is_package, type_checking=type_checking):
            # `from a import b` is an arrow to module a.b if there is one, else to a.
            for imported in [
                f"{base}.{n}" if n and f"{base}.{n}" in paths else base for n in names
            ]:
                while imported and imported not in paths:
                    imported = imported.rpartition(".")[0]
                if imported and imported != name:
                    targets.add(imported)
        graph[name] = frozenset(targets)
    return graph


def _imports(
    tree: ast.Module, module: str, is_package: bool, *, type_checking: bool
) -> Iterable[tuple[str, list[str]]]:
    """(module, names imported from it); a plain ``import a.b`` is ("a.b", [""])."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree) if type_checking else _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, [""]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base, [alias.name for alias in node.names]


def _runtime_nodes(tree: ast.AST) -> Iterable[ast.AST]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (n for child in node.orelse for n in (child, *_runtime_nodes(child)))
            continue
        yield node
        yield from _runtime_nodes(node)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def cycles(graph: Graph) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def wing_of(module: str, wings: Sequence[Wing]) -> Wing | None:
    """The most specific wing whose name is the module or a package above it."""
    matches = [
        w for w in wings if module == w.name or (w.package and module.startswith(w.name + "."))
    ]
    return max(matches, key=lambda w: len(w.name), default=None)


def wrong_arrows(graph: Graph, wings: Sequence[Wing]) -> list[str]:
    """Arrows that point up or sideways between wings, and modules that belong to no wing."""
    problems = []
    for source, targets in sorted(graph.items()):
        here = wing_of(source, wings)
        if here is None:
            problems.append(f"{source} belongs to no wing: add it to the map in test_layering.py")
            continue
        for target in sorted(targets):
            there = wing_of(target, wings)
            if there is None or there is here:
                continue
            if there.rank >= here.rank:
                problems.append(
                    f"{source} ({here.name}, rank {here.rank}) imports {target} "
                    f"({there.name}, rank {there.rank})"
                )
    return problems


def flat_modules(package: Path) -> list[str]:
    """The modules right in ``package``'s folder (``__init__.py`` included), by name."""
    return sorted(path.name for path in package.glob("*.py"))


def too_many_flat(package: Path, limit: int) -> list[str]:
    """A complaint if ``package`` holds more than ``limit`` flat modules, naming them."""
    flat = flat_modules(package)
    if len(flat) <= limit:
        return []
    return [
        f"{package.name}/ holds {len(flat)} flat modules, at most {limit}: move one into "
        f"the wing it belongs to ({', '.join(flat)})"
    ]
