"""The order a run measures its cases in, and how long it will take: pure, no process.

A *block* is a set of cases measured back to back in every round: the connected
members of the ratio groups the targets ask for (`bench._targets.wanted_pairs`),
so that a scenario that is the A of several B's (mesh-stdio against the raw pipe
and against the MCP SDK) is measured ONCE per round, next to each of them,
instead of once per pair. Inside a block the cases are laid out as a path
through the pairs (the raw pipe, mesh-stdio, the MCP SDK, the mounted MCP tool),
so most pairs are neighbours and every pair is seconds apart; the blocks of
one scenario on asyncio and on trio follow each other, for trio's ratio to
asyncio. A case no target divides is a block of its own.

A round measures every block once; rounds repeat the whole plan, so a noisy
minute spreads over every case instead of landing on one. A case whose figures
do not vary run to run (`Scenario.max_repeat`: memory per idle link) runs only
in its first rounds.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Block", "estimate_s", "order_blocks", "plan_rounds"]

#: Seconds a run spends outside its warm-up and measured window (the interpreter,
#: the server children, the probes), by scenario; the default covers a plain
#: client and one server child. Refined by what the run itself took in round one.
SETUP_S: Mapping[str, float] = {
    "ws-idle": 25.0,
    "mesh-idle": 40.0,
    "ws-fanout": 12.0,
    "mesh-broadcast": 15.0,
    "registry": 20.0,
    "kv-raw": 8.0,
    "cluster-registry": 10.0,
}
DEFAULT_SETUP_S = 3.5


C = TypeVar("C", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Block(Generic[C]):
    """Cases measured back to back in each round, in this order."""

    cases: tuple[C, ...]


def _path(members: Sequence[C], edges: Mapping[C, set[C]]) -> list[C]:
    """A walk through `members` that follows `edges` where it can (greedy: start at the
    least-connected member, always step to the least-connected unvisited neighbour)."""
    left = list(members)
    order: list[C] = []
    while left:
        step: C | None = min(left, key=lambda c: len(edges[c] & set(left)))
        while step is not None:
            here = step
            order.append(here)
            left.remove(here)
            nearby = [c for c in left if c in edges[here]]
            step = min(nearby, key=lambda c: len(edges[c] & set(left))) if nearby else None
    return order


def order_blocks(
    cases: Sequence[C], groups: Iterable[Sequence[C]], twin: Mapping[C, object]
) -> list[Block[C]]:
    """The blocks of a round, in plan order.

    `groups` are the cases each ratio divides (A first); `twin` maps a case to a key
    shared by its other-backend self (its scenario and mode), so the asyncio and
    trio blocks of one scenario are measured one after the other.
    """
    edges: dict[C, set[C]] = {case: set() for case in cases}
    for group in groups:
        for a in group:
            edges[a] |= {b for b in group if b is not a}
    position = {case: index for index, case in enumerate(cases)}
    seen: set[C] = set()
    components: list[list[C]] = []
    for case in cases:
        if case in seen:
            continue
        component, todo = [], [case]
        seen.add(case)
        while todo:
            here = todo.pop()
            component.append(here)
            for near in edges[here] - seen:
                seen.add(near)
                todo.append(near)
        # keep the plan's own order among members before walking
        component.sort(key=position.__getitem__)
        components.append(component)
    first_twin: dict[object, int] = {}
    for index, component in enumerate(components):
        first_twin.setdefault(twin[component[0]], index)
    ranked = sorted(enumerate(components), key=lambda ic: (first_twin[twin[ic[1][0]]], ic[0]))
    return [Block(tuple(_path(component, edges))) for _, component in ranked]


#: Rounds of the targets' cases measured before the cases no target reads get their one
#: run: under a budget, two rounds of every pair come before the rest of the table.
ROUNDS_BEFORE_ONCE = 2


def plan_rounds(
    blocks: Sequence[Block[C]],
    rounds: int,
    cap: Mapping[C, int | None],
    once: Collection[C] = (),
) -> list[tuple[int, list[Block[C]]]]:
    """The passes of a run, in order: (round index, its blocks).

    Every case runs once per round while its `cap` (max repeats) allows; the cases
    in `once` (no target reads them) run in round one only, in a pass of their own
    after `ROUNDS_BEFORE_ONCE` rounds, so a budget cuts them before the pairs.
    """
    passes: list[tuple[int, list[Block[C]]]] = []
    for index in range(rounds):
        this = []
        for block in blocks:
            kept = tuple(c for c in block.cases if c not in once and (cap.get(c) or rounds) > index)
            if kept:
                this.append(Block(kept))
        passes.append((index, this))
    alone = [Block(k) for b in blocks if (k := tuple(c for c in b.cases if c in once))]
    if alone:
        passes.insert(min(ROUNDS_BEFORE_ONCE, rounds), (0, alone))
    return [(index, blocks) for index, blocks in passes if blocks]


def estimate_s(scenario: str, warmup: float, duration: float, took: float | None = None) -> float:
    """Seconds one run of `scenario` takes: what it took before, else the table's guess."""
    if took is not None:
        return took
    return warmup + duration + SETUP_S.get(scenario, DEFAULT_SETUP_S)
