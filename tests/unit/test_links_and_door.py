"""The orchestrator is a links table and a door: each works as its own object, and only the
door turns an agent's name into its link's caller.

A surface that manages agents holds the table; one that calls them holds the door. The
door must need nothing of the orchestrator but the table, and the table must make no
call for anyone: a surface that held it could otherwise skip the check every call runs.
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from mesh import (
    EMBEDDER,
    Agent,
    AgentSpec,
    Forbidden,
    MeshOrchestrator,
    Principal,
    local_connector,
)
from mesh._orchestrator.door import Door
from mesh._orchestrator.router import Notices, Router
from mesh._orchestrator.table import LinkTable

pytestmark = pytest.mark.anyio

GUARD = 10
MESH = Path(__file__).resolve().parents[2] / "mesh"
#: The modules that may ask the links table for a link's caller: the door, after its check.
ASKS_FOR_A_CALLER = {"_orchestrator/door.py"}


class Counted:
    """An agent that counts the tool calls that reached it."""

    def __init__(self) -> None:
        self.asked = 0
        self.agent = Agent("counted")

        @self.agent.tool
        def count() -> int:
            """Count this call."""
            self.asked += 1
            return self.asked


@asynccontextmanager
async def table_and_door(counted: Counted) -> AsyncIterator[tuple[LinkTable, Door]]:
    """The two parts wired by hand, as ``MeshOrchestrator`` wires them: no orchestrator."""
    table = LinkTable([AgentSpec("counted", local_connector(counted.agent))])
    door = Door(table, max_call_timeout=5.0)
    table.handler = Router(door, Notices())
    with anyio.fail_after(GUARD):
        async with table.open():
            yield table, door


async def test_the_door_calls_through_a_table_of_its_own() -> None:
    counted = Counted()
    async with table_and_door(counted) as (table, door):
        assert table.view("counted") is not None
        assert await door.call_tool("counted", "count", on_behalf_of=EMBEDDER) == 1
        assert await door.as_embedder().call_tool("counted", "count") == 2
    assert counted.asked == 2


async def test_the_door_refuses_before_the_table_is_asked() -> None:
    counted = Counted()
    async with table_and_door(counted) as (_, door):
        with pytest.raises(Forbidden) as nobody:
            await door.call_tool("counted", "count")
        with pytest.raises(Forbidden) as too_long:
            await door.acting_for(Principal.client("ops", admin=True)).call_tool(
                "counted", "count", timeout=60.0
            )
    assert "names nobody" in nobody.value.message
    assert "max_call_timeout" in too_long.value.message
    assert counted.asked == 0


def test_the_table_makes_no_call() -> None:
    """Managing agents and calling them are apart: the table has no call of its own."""
    calls = {"call", "call_tool", "list_tools", "ping", "broadcast", "multicast", "acting_for"}
    assert not calls & set(dir(LinkTable))
    assert calls <= set(dir(Door))


async def test_the_orchestrator_is_the_two_composed() -> None:
    mesh = MeshOrchestrator(max_call_timeout=3.0)
    assert isinstance(mesh.links, LinkTable)
    assert isinstance(mesh.door, Door)
    assert mesh.registry is mesh.links.registry is mesh.door.registry
    mesh.max_call_timeout = 4.0
    assert mesh.door.max_call_timeout == 4.0


def _asks_for_a_caller(tree: ast.AST) -> list[int]:
    """Lines that call ``….links.caller(…)`` or ``….table.caller(…)``: a link's caller, by name."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if node.func.attr == "caller" and ("links" in name or "table" in name):
            found.append(node.lineno)
    return found


def test_only_the_door_asks_the_table_for_a_caller() -> None:
    """Every rule lives once in the call path: no surface takes a link's caller past the door."""
    askers = {}
    for path in MESH.rglob("*.py"):
        lines = _asks_for_a_caller(ast.parse(path.read_text(), str(path)))
        if lines:
            askers[path.relative_to(MESH).as_posix()] = lines
    assert set(askers) == ASKS_FOR_A_CALLER, askers
