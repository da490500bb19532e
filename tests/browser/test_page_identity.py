"""Who the page is signed in as, in a real Chromium: shown, and never switched by a link unasked.

Also the page's Content-Security-Policy: sockets go back to the daemon only
(``connect-src 'self'``), and the page still watches agents over them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from .conftest import LiveDaemon, start_daemon, stop_daemon

ECHO = ["{speaker} said: {last}"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaemon]:
    """One daemon for the module: the tests open no rooms, and each signs in with a token of
    its own name in a browser context of its own (the `page` fixture)."""
    scripts = {"alice": ("Alice", "participant", ECHO), "bob": ("Bob", "participant", ECHO)}
    live = start_daemon(tmp_path_factory.mktemp("identity"), scripts, backend="asyncio", delay=0.0)
    try:
        yield live
    finally:
        stop_daemon(live)


def _token(daemon: LiveDaemon, role: str, name: str) -> str:
    headers = {"authorization": f"Bearer {daemon.token}"}
    with httpx.Client(base_url=daemon.url, headers=headers, timeout=10) as http:
        created = http.post("/tokens", json={"role": role, "name": name})
    assert created.status_code == 201, created.text
    token: str = created.json()["token"]
    return token


def _sign_in(page: Any, daemon: LiveDaemon, token: str) -> None:
    page.goto(daemon.page_url())
    page.fill("#token", token)
    page.click("#signin-form button")
    page.wait_for_selector("#app:not([hidden])")


def test_the_page_shows_who_it_is_signed_in_as(page: Any, daemon: LiveDaemon) -> None:
    _sign_in(page, daemon, _token(daemon, "observer", "wall-screen"))
    page.wait_for_selector("#whoami:has-text('signed in as wall-screen (observer)')")
    page.wait_for_selector('#agents tr[data-agent="alice"] .badge.online')  # a socket, under CSP
    page.click("#signout")
    page.wait_for_selector("#whoami", state="hidden")


def test_a_token_link_asks_before_it_switches_identity(page: Any, daemon: LiveDaemon) -> None:
    assert daemon.token is not None
    _sign_in(page, daemon, daemon.token)
    page.wait_for_selector("#whoami:has-text('signed in as admin (admin)')")
    mallory = _token(daemon, "client", "mallory")
    page.goto(daemon.page_url(f"token={mallory}"))
    page.wait_for_selector("#link-offer:not([hidden])")
    assert page.inner_text("#link-name") == "mallory" and page.inner_text("#link-role") == "client"
    assert "token=" not in page.url  # taken out of the address at once
    # Nothing switched while the page asks; declining keeps the tab as it was.
    page.wait_for_selector("#whoami:has-text('signed in as admin (admin)')")
    page.click("#link-decline")
    page.wait_for_selector("#link-offer", state="hidden")
    assert page.inner_text("#whoami") == "signed in as admin (admin)"
    # Asked again, and accepted: now the tab is mallory, and says so.
    page.goto(daemon.page_url(f"token={mallory}"))
    page.click("#link-accept")
    page.wait_for_selector("#whoami:has-text('signed in as mallory (client)')")


def test_a_link_to_a_tab_not_signed_in_asks_too(page: Any, daemon: LiveDaemon) -> None:
    page.goto(daemon.page_url(f"token={_token(daemon, 'client', 'maker')}"))
    page.wait_for_selector("#link-offer:not([hidden])")
    page.wait_for_selector("#signin:not([hidden])")  # not signed in meanwhile
    assert page.is_hidden("#app")
    page.click("#link-accept")
    page.wait_for_selector("#whoami:has-text('signed in as maker (client)')")


def test_the_content_security_policy_keeps_sockets_on_the_daemon(daemon: LiveDaemon) -> None:
    with httpx.Client(base_url=daemon.url, timeout=10) as http:
        policy = http.get("/").headers["content-security-policy"]
    assert "connect-src 'self';" in policy and "ws:" not in policy and "wss:" not in policy
