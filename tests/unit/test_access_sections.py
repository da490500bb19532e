"""A remote agent's access section is validated once per entry its holder writes. Pure."""

from __future__ import annotations

from mesh.cluster._calls import NO_ACCESS, AccessSections
from mesh.cluster._wire import AgentEntry
from mesh.manifests import AccessSection
from mesh.manifests._types import DEFAULT_ACCESS


def entry(access: dict[str, object] | None) -> AgentEntry:
    return AgentEntry(daemon="a", id="guarded", name="guarded", status="online", access=access)


def test_a_section_is_kept_for_its_entry_and_follows_a_new_one() -> None:
    sections = AccessSections()
    first = entry({"callers": ["agent:relay"], "calls": []})
    section = sections.of("guarded", first)
    assert section == AccessSection(callers=("agent:relay",), calls=())
    assert sections.of("guarded", first) is section  # the same entry: not converted again
    # The holder writes the agent again with other callers: the new entry is read.
    assert sections.of("guarded", entry({"callers": ["clients"]})) == AccessSection(
        callers=("clients",)
    )


def test_no_section_is_the_defaults_and_a_bad_one_admits_nobody() -> None:
    sections = AccessSections()
    assert sections.of("guarded", entry(None)) is DEFAULT_ACCESS
    assert sections.of("guarded", entry({"callers": ["everyone!"]})) is NO_ACCESS
    assert sections.of("guarded", entry({"callers": 7})) is NO_ACCESS
    assert AccessSection(callers=(), calls=()) == NO_ACCESS


def test_an_agent_no_daemon_holds_is_forgotten_and_the_table_is_bounded() -> None:
    sections = AccessSections(kept=2)
    for name in ("x", "y"):
        sections.of(name, entry({"callers": ["agents"]}))
    assert sections.of("x", None) is None
    assert len(sections) == 1
    sections.of("x", entry({"callers": ["agents"]}))
    sections.of("z", entry({"callers": ["agents"]}))  # past the bound: it starts afresh
    assert len(sections) == 1
