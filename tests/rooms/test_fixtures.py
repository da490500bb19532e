"""The demo's scripted chat reads as a conversation: each of Alice's lines answers Bob's last."""

from __future__ import annotations

from mesh.demo.fixtures import demo_chat


def test_alice_answers_the_question_bob_just_asked() -> None:
    alice, bob = demo_chat()
    asked = bob.persona.provider.script
    answered = alice.persona.provider.script
    # Turn 2k is Bob's k-th line; turn 2k+1 is Alice's (k+1)-th, which answers it.
    pairs = [
        ("How do you prevent that?", "enforced by the build"),
        ("What about the data?", "On the data"),
    ]
    pairs.append(("capacity", "On scaling"))
    pairs.append(("What would make you change course?", "the trigger for a first service"))
    for k, (question, answer) in enumerate(pairs):
        assert question in asked[k], asked[k]
        assert answer in answered[k + 1], answered[k + 1]
