"""A request's path and query: a plain path is taken as it is, anything else is split."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from transports import HttpRequest


@pytest.mark.parametrize(
    "target",
    [
        "/ws",
        "/",
        "/rpc",
        "/a b",
        "/%2F",
        "/a:b@c",
        "/http://x",
        "//host/path",
        "/a;b",
        "/a?b=1&b=2&c",
        "/ws?token=t&agent=a",
        "/a#fragment",
        "/a\tb",
        "*",
        "",
    ],
)
def test_path_and_query_are_what_urlsplit_makes_of_the_target(target: str) -> None:
    request = HttpRequest("GET", target, ())
    parts = urlsplit(target)
    assert request.path == (parts.path or "/")
    assert request.query == parse_qs(parts.query)
