"""TokenAuthenticator: each token names one agent; revoking forgets tokens, by token or by agent."""

from __future__ import annotations

import pytest

from transports import TokenAuthenticator, bearer_token


def test_each_token_names_its_agent_and_unknown_tokens_name_none() -> None:
    tokens = TokenAuthenticator({"t-a1": "a", "t-a2": "a", "t-b": "b"})
    assert [tokens.identify(t) for t in ("t-a1", "t-a2", "t-b")] == ["a", "a", "b"]
    assert tokens.identify("nope") is None and tokens.identify(None) is None
    assert tokens.identify("") is None
    assert set(tokens.agents()) == {"a", "b"} and len(tokens) == 3


def test_revoke_agent_forgets_every_token_of_that_agent_only() -> None:
    tokens = TokenAuthenticator({"t-a1": "a", "t-a2": "a", "t-b": "b"})
    assert tokens.revoke_agent("a") == 2
    assert tokens.identify("t-a1") is None and tokens.identify("t-a2") is None
    assert tokens.identify("t-b") == "b"
    assert tokens.revoke_agent("a") == 0  # nothing left to forget
    assert tokens.revoke("t-b") and not tokens.revoke("t-b")
    assert len(tokens) == 0


def test_an_empty_token_is_refused_when_added() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        TokenAuthenticator({"": "a"})


@pytest.mark.parametrize(
    ("authorization", "query", "expected"),
    [
        ("Bearer abc", None, "abc"),
        ("bearer  abc ", "q", "abc"),  # the header wins; case and spaces do not matter
        (None, "q", "q"),
        ("Basic abc", None, None),
        ("Bearer ", None, None),
    ],
)
def test_bearer_token_reads_the_header_then_the_query(
    authorization: str | None, query: str | None, expected: str | None
) -> None:
    assert bearer_token(authorization, query) == expected
