"""A manifest's ``[access]`` section: who may call the agent, and whom it may call."""

from __future__ import annotations

from pathlib import Path

import pytest

from mesh.manifests import AccessSection, ManifestError, load_manifest

HEAD = 'id = "bob"\n[transport]\ntype = "dial-in"\ntoken_env = "BOB_TOKEN"\n'


def manifest(tmp_path: Path, access: str) -> Path:
    path = tmp_path / "bob.toml"
    path.write_text(HEAD + access)
    return path


def test_the_default_lets_any_client_and_any_agent_call_and_calls_anyone(tmp_path: Path) -> None:
    loaded = load_manifest(manifest(tmp_path, ""))
    assert loaded.access == AccessSection(callers=("clients", "agents"), calls=("*",))


def test_an_access_section_is_read(tmp_path: Path) -> None:
    access = '[access]\ncallers = ["client:ops", "agent:alice"]\ncalls = ["alice", "echo-2"]\n'
    loaded = load_manifest(manifest(tmp_path, access))
    assert loaded.access.callers == ("client:ops", "agent:alice")
    assert loaded.access.calls == ("alice", "echo-2")


@pytest.mark.parametrize(
    ("access", "field", "reason"),
    [
        ('callers = ["everyone"]', "$.access.callers[0]", "Expected `clients`, `agents`"),
        ('callers = ["clients", "agent:Bad"]', "$.access.callers[1]", "'agent:Bad'"),
        ('calls = ["*", "no spaces"]', "$.access.calls[1]", "Expected an agent id or `*`"),
        ('caller = ["clients"]', "$.access", "did you mean `callers`?"),
    ],
)
def test_a_wrong_access_section_names_the_field(
    tmp_path: Path, access: str, field: str, reason: str
) -> None:
    with pytest.raises(ManifestError) as caught:
        load_manifest(manifest(tmp_path, f"[access]\n{access}\n"))
    assert caught.value.field == field
    assert reason in caught.value.reason
