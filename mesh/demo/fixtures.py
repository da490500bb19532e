"""Scripted personas that make rooms run offline and the same way every time.

* :func:`demo_chat` — Alice (architect) and Bob (critic) on :data:`DEMO_TOPIC`:
  twelve messages, each of Alice's answering Bob's question before it, and Bob's
  last one says goodbye (``GOODBYE`` at turn 12).
* :func:`demo_review` — an architect and a builder on :data:`REVIEW_TASK`:
  the first diff lacks a test, the critique says so, the second diff adds it,
  and the architect verifies in round 2 (``CONVERGED`` at turn 7).

The scripted provider picks reply *n* by how often the agent has spoken in the
history it is shown, so these replay identically after a pause or a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from mesh.manifests._types import Persona
from mesh.providers._base import ProviderConfig
from mesh.rooms._roles import role_persona

__all__ = ["DEMO_TOPIC", "REVIEW_TASK", "ScriptedSeat", "demo_chat", "demo_review", "scripted"]

DEMO_TOPIC: Final = (
    "Should a five-person team start a new product as a monolith or as microservices?"
)
REVIEW_TASK: Final = "Add a --verbose flag to the `greet` command that also prints the time of day."


@dataclass(frozen=True, slots=True)
class ScriptedSeat:
    """An agent id, its display name, and a persona with a scripted provider."""

    id: str
    name: str
    persona: Persona


def scripted(role: str, *lines: str) -> Persona:
    """``role``'s ready persona, answering ``lines`` in order (then from the top)."""
    return role_persona(role, ProviderConfig(provider="scripted", script=lines))


_ALICE: Final = (
    "I'd start with a modular monolith: one deployable and one database, but strict module "
    "boundaries inside it, so we can cut services out later along seams we have actually seen.",
    "Fair, {speaker}. The boundaries are enforced by the build: each module exposes one public "
    "package, and a lint rule fails the build on any import that reaches past it.",
    "On the data: one schema per module, no joins across modules, every table owned by "
    "exactly one module. That rule is what makes extracting a service cheap later.",
    "On scaling: the hot path is search, and we can run more copies of the whole monolith "
    "behind the load balancer. Crude, but it is one dashboard and one on-call rotation, not eight.",
    "Then the trigger for a first service is concrete: a module whose load or release cadence "
    "differs from the rest for a whole quarter. Search is the likely first candidate.",
    "So: a modular monolith now, boundaries enforced by tooling, a schema per module, and a "
    "written trigger for extraction. I think we have a plan.",
)

_BOB: Final = (
    "Boundaries inside a monolith erode, {speaker}. Under deadline pressure someone imports the "
    "billing internals from the orders module, and nothing stops them. How do you prevent that?",
    "A lint rule covers the code, but the database is where coupling hides. If two modules share "
    "tables, neither can ever be extracted. What about the data?",
    "And when search needs ten times the capacity of everything else? Scaling the whole monolith "
    "for one module wastes money, doesn't it?",
    "That I can accept. What would make you change course? Without an explicit trigger, 'later' "
    "tends to mean 'never'.",
    "A quarter of divergent load is measurable, which I like. My remaining worry is the team's "
    "discipline, but the tooling covers most of it.",
    "I'm convinced: the plan answers every concern I raised, and the trigger keeps us honest. "
    "Thanks, Alice. Goodbye.",
)

_PLAN: Final = """Plan: add a `--verbose` flag to `greet`. Scope: cli.py and its test.
Checklist:
- [ ] the flag is parsed with argparse
- [ ] verbose output names the time of day
- [ ] a test covers both outputs"""

_DIFF_1: Final = """--- a/cli.py
+++ b/cli.py
@@ -1,6 +1,9 @@
 import argparse
+import time

 def greet(argv=None):
     parser = argparse.ArgumentParser()
+    parser.add_argument("--verbose", action="store_true")
     args = parser.parse_args(argv)
-    return "hello"
+    part = "morning" if time.localtime().tm_hour < 12 else "day"
+    return f"hello, good {part}" if args.verbose else "hello\""""

_DIFF_2: Final = (
    _DIFF_1
    + """
--- a/test_cli.py
+++ b/test_cli.py
@@ -0,0 +1,5 @@
+from cli import greet
+
+def test_greet_plain_and_verbose():
+    assert greet([]) == "hello"
+    assert greet(["--verbose"]).startswith("hello, good ")"""
)

_ARCHITECT: Final = (
    _PLAN,
    "Critique: the flag is parsed and the verbose output names the time of day, but the "
    "checklist is not done:\n- [x] the flag is parsed with argparse\n"
    "- [x] verbose output names the time of day\n- [ ] a test covers both outputs",
    "Not yet: the checklist item `a test covers both outputs` is unchecked.",
    "Critique: the new test covers the plain and the verbose output; every checklist item is done.",
    "Verified: meets scope & checklist.",
)


def demo_chat() -> tuple[ScriptedSeat, ScriptedSeat]:
    """Alice and Bob, for a chat on :data:`DEMO_TOPIC` that ends with ``GOODBYE``."""
    return (
        ScriptedSeat("alice", "Alice", scripted("architect", *_ALICE)),
        ScriptedSeat("bob", "Bob", scripted("critic", *_BOB)),
    )


def demo_review() -> tuple[ScriptedSeat, ScriptedSeat]:
    """The architect and the builder, for a review of :data:`REVIEW_TASK` that converges."""
    return (
        ScriptedSeat("architect", "Ada", scripted("architect", *_ARCHITECT)),
        ScriptedSeat("builder", "Ben", scripted("builder", _DIFF_1, _DIFF_2)),
    )
