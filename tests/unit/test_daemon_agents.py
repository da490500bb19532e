"""How the daemon shows an agent: what a reader of the agents list may see of its URL."""

from __future__ import annotations

import pytest

from mesh.daemon._agents import describe, shown_endpoint
from registry import AgentId, AgentRecord


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:p@x.example:8443/mcp?api_key=S3CRET&v=1#part", "https://x.example:8443/mcp?api_key=…&v=…"),
        ("http://127.0.0.1:8080/a2a/echo", "http://127.0.0.1:8080/a2a/echo"),
        ("http://[::1]:9/mcp?key", "http://[::1]:9/mcp?key=…"),
        ("http://host:99999/", "(a URL that does not parse)"),
        (None, None),
    ],
)  # fmt: skip
def test_an_endpoint_is_shown_without_what_may_be_a_key(url: str | None, shown: str | None) -> None:
    assert shown_endpoint(url) == shown


def test_a_link_error_that_quotes_the_url_quotes_it_as_shown() -> None:
    url = "https://x.example/mcp?api_key=S3CRET"
    record = AgentRecord(id=AgentId("fs"), name="fs", transport="http", endpoint=url)
    described = describe(record, 0.0, f"ConnectError: could not reach {url}", registered=False)
    assert described["endpoint"] == "https://x.example/mcp?api_key=…"
    assert (
        described["link_error"] == "ConnectError: could not reach https://x.example/mcp?api_key=…"
    )
    assert "S3CRET" not in repr(described)
