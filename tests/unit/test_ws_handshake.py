"""The WebSocket handshake's pure checks: RFC 6455's sample, what is accepted as well as
what is refused (the refusals on the wire are in tests/integration/test_websocket_handshake.py)."""

from __future__ import annotations

import pytest

from transports._ws_handshake import (
    BadResponse,
    Refusal,
    accept_key,
    check_switch,
    check_upgrade,
    new_key,
    switching_response,
    upgrade_request,
)

KEY = "dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 1.3
ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
HEADERS = (
    ("host", "server.example.com"),
    ("upgrade", "websocket"),
    ("connection", "Upgrade"),
    ("sec-websocket-key", KEY),
    ("sec-websocket-version", "13"),
)


def test_the_accept_key_of_rfc_6455s_sample() -> None:
    assert accept_key(KEY) == ACCEPT


def test_a_valid_upgrade_gives_its_accept_key_and_no_subprotocol() -> None:
    assert check_upgrade("GET", "1.1", HEADERS) == (ACCEPT, None)


def test_lists_are_read_across_repeats_and_case() -> None:
    headers = (
        *HEADERS[:2],
        ("connection", "keep-alive"),
        ("connection", "UPGRADE"),
        *HEADERS[3:],
        ("sec-websocket-protocol", "chat, bearer.abc"),
        ("sec-websocket-protocol", "mesh"),
    )
    assert check_upgrade("GET", "1.1", headers) == (ACCEPT, "mesh")


def test_a_second_upgrade_protocol_is_refused_with_426() -> None:
    headers = (*HEADERS, ("upgrade", "h2c"))
    refused = check_upgrade("GET", "1.1", headers)
    assert isinstance(refused, Refusal) and refused.status == 426
    assert "Upgrade must be `websocket` alone" in refused.why


def test_the_101_is_answered_and_checked_by_our_two_sides() -> None:
    key = new_key()
    response = switching_response(accept_key(key), "mesh", [("mesh-agent-info", "x1")])
    switched = check_switch(response.removesuffix(b"\r\n\r\n"), key, ["mesh"])
    assert (switched.status, switched.broken) == (101, None)
    assert switched.header("mesh-agent-info") == "x1"


def test_a_101_for_another_key_is_broken() -> None:
    response = switching_response(accept_key(new_key()), None)
    switched = check_switch(response.removesuffix(b"\r\n\r\n"), new_key())
    assert switched.broken == "its Sec-WebSocket-Accept does not answer our key"


def test_a_header_line_without_a_colon_is_not_a_response() -> None:
    with pytest.raises(BadResponse, match="malformed header line"):
        check_switch(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade websocket", KEY)


def test_the_request_is_the_handshakes_then_ours_and_refuses_a_line_break() -> None:
    request = upgrade_request("h:1", "/ws?a=1", KEY, [("Authorization", "Bearer t")])
    assert request.startswith(b"GET /ws?a=1 HTTP/1.1\r\nHost: h:1\r\nUpgrade: websocket\r\n")
    assert request.endswith(b"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer t\r\n\r\n")
    with pytest.raises(ValueError, match="CR or LF"):
        upgrade_request("h", "/", KEY, [("X", "a\r\nEvil: 1")])


@pytest.mark.parametrize(
    ("line", "value"),
    [
        (b"mesh-agent-info: x1", "x1"),
        (b"mesh-agent-info:x1", "x1"),
        (b"mesh-agent-info: \t x1 \t ", "x1"),  # spaces and tabs around it are not the value
        (b"mesh-agent-info: a b\tc  ", "a b\tc"),  # inside it they are
        (b"mesh-agent-info:   ", ""),
    ],
)
def test_a_101s_header_value_is_read_without_the_spaces_around_it(line: bytes, value: str) -> None:
    key = new_key()
    head = switching_response(accept_key(key), None).removesuffix(b"\r\n\r\n") + b"\r\n" + line
    switched = check_switch(head, key)
    assert (switched.broken, switched.header("mesh-agent-info")) == (None, value)


@pytest.mark.parametrize("line", [b"Upgrade : websocket", b"Upgrade: web\rsocket", b": x"])
def test_a_malformed_header_line_in_a_101_is_not_a_response(line: bytes) -> None:
    with pytest.raises(BadResponse, match="malformed header line"):
        check_switch(b"HTTP/1.1 101 Switching Protocols\r\n" + line, KEY)


def test_a_plain_url_is_parsed_once_and_one_holding_a_secret_every_time() -> None:
    from websockets.uri import parse_uri

    from transports import ConnectFailed, _websocket

    _websocket._parse_plain_url.cache_clear()
    url = "ws://127.0.0.1:8000/ws"
    first = _websocket._parse_ws_url(url)
    assert first == parse_uri(url) and _websocket._parse_ws_url(url) is first
    for secret in ("ws://127.0.0.1:8000/ws?token=s3cret", "ws://ada:s3cret@127.0.0.1:8000/ws"):
        assert _websocket._parse_ws_url(secret) == parse_uri(secret)
    assert _websocket._parse_plain_url.cache_info().currsize == 1  # no secret kept
    with pytest.raises(ConnectFailed, match="not a WebSocket URL"):
        _websocket._parse_ws_url("http://127.0.0.1/ws")
