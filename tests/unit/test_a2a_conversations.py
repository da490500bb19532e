"""What the A2A server keeps of each client's chat conversations: bounded per client and
in characters, so no client can push another's out or grow them without end."""

from __future__ import annotations

from mesh.a2a._mapping import (
    MAX_CONVERSATION_CHARS,
    MAX_CONVERSATIONS_PER_OWNER,
    Conversations,
)


def test_a_client_opening_contexts_without_end_forgets_only_its_own() -> None:
    kept = Conversations()
    kept.turn("token:ann", "alice", "ann-1", "hello")
    kept.turn("token:ann", "alice", "ann-1", "still me")
    for n in range(MAX_CONVERSATIONS_PER_OWNER + 10):
        kept.turn("token:mallory", "alice", f"m-{n}", "x")
    again = kept.turn("token:ann", "alice", "ann-1", "and again")
    assert again["turn"] == 3  # ann's conversation went on
    assert [m["content"] for m in again["messages"]] == ["hello", "still me", "and again"]
    # Mallory's newest are kept and her oldest forgotten: it starts again at turn 1.
    newest = MAX_CONVERSATIONS_PER_OWNER + 9
    assert kept.turn("token:mallory", "alice", f"m-{newest}", "x")["turn"] == 2
    assert kept.turn("token:mallory", "alice", "m-0", "x")["turn"] == 1


def test_a_conversation_keeps_its_newest_messages_within_its_characters() -> None:
    kept = Conversations()
    big = "y" * (MAX_CONVERSATION_CHARS // 3)
    for n in range(5):
        sent = kept.turn("token:ann", "alice", "c", f"{n}{big}")
        kept.replied("token:ann", "alice", "c", f"reply {n}")
    messages = sent["messages"]
    assert sum(len(m["content"]) for m in messages) <= MAX_CONVERSATION_CHARS
    assert messages[-1]["content"].startswith("4")  # the newest is always there
    huge = kept.turn("token:ann", "alice", "c", "z" * (2 * MAX_CONVERSATION_CHARS))
    assert [m["content"][0] for m in huge["messages"]] == ["z"]  # alone, but kept
