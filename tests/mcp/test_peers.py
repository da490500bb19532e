"""The npm MCP peers are required where the suite must be whole (``make test``, CI)."""

from __future__ import annotations

import shutil

import pytest

from tests.mcp._peers import everything_command


@pytest.fixture
def no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "node" else real_which(name))
    monkeypatch.delenv("MESH_REQUIRE_NODE", raising=False)
    monkeypatch.delenv("CI", raising=False)


@pytest.mark.usefixtures("no_node")
@pytest.mark.parametrize("variable", ["MESH_REQUIRE_NODE", "CI"])
def test_a_missing_node_fails_where_the_suite_must_be_whole(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "1")
    with pytest.raises(pytest.fail.Exception, match="node is not installed"):
        everything_command()


@pytest.mark.usefixtures("no_node")
def test_elsewhere_a_missing_node_skips_and_says_why() -> None:
    with pytest.raises(pytest.skip.Exception, match="node is not installed"):
        everything_command()
