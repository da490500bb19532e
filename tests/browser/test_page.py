"""The room page in a real browser: agents, a room filling in, controls, a person, escaping."""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.integration._daemon import LONG_LIMITS

from .conftest import LiveDaemon, remove_every_room, screenshot, start_daemon, stop_daemon

ALICE = [
    "I'd start with a modular monolith: one deployable, clear module boundaries.",
    "Fair, Bob. Then we enforce the boundaries with an import-linter rule in CI.",
    "Agreed: split a service out only when a module needs its own scaling.",
]
BOB = [
    "Boundaries inside a monolith erode, Alice, unless something checks them.",
    "A CI rule I can live with. What about the database?",
    "One schema per module, then. I'm convinced.",
]
#: Personas that answer whoever spoke last, by name: a person sees they were heard.
ECHO = ["{speaker} said: {last}"]
HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b>bold</b>'


def _client(daemon: LiveDaemon) -> httpx.Client:
    headers = {"authorization": f"Bearer {daemon.token}"} if daemon.token else {}
    return httpx.Client(base_url=daemon.url, headers=headers, timeout=10)


def _open(page: Any, daemon: LiveDaemon, fragment: str = "") -> None:
    page.goto(daemon.page_url(fragment))
    if daemon.token:
        page.fill("#token", daemon.token)
        page.click("#signin-form button")
    page.wait_for_selector("#app:not([hidden])")


@pytest.fixture(params=["asyncio", "trio"])
def chat_daemon(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LiveDaemon]:
    scripts = {
        "alice": ("Alice", "architect", ALICE),
        "bob": ("Bob", "critic", BOB),
    }
    daemon = start_daemon(tmp_path, scripts, backend=request.param, delay=0.4, tools=True)
    try:
        yield daemon
    finally:
        stop_daemon(daemon)


@pytest.fixture(scope="module")
def shared_echo_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaemon]:
    scripts = {"alice": ("Alice", "participant", ECHO), "bob": ("Bob", "participant", ECHO)}
    directory = tmp_path_factory.mktemp("echo-daemon")
    daemon = start_daemon(directory, scripts, backend="trio", delay=0.1)
    try:
        yield daemon
    finally:
        stop_daemon(daemon)


@pytest.fixture
def echo_daemon(shared_echo_daemon: LiveDaemon) -> Iterator[LiveDaemon]:
    """The module's echo daemon, with no rooms before and after the test."""
    remove_every_room(shared_echo_daemon)
    yield shared_echo_daemon
    remove_every_room(shared_echo_daemon)


def test_agents_show_and_a_room_started_from_the_page_fills_in(
    page: Any, chat_daemon: LiveDaemon
) -> None:
    _open(page, chat_daemon)
    page.wait_for_selector('#agents tr[data-agent="alice"] .badge.online')
    page.wait_for_selector('#agents tr[data-agent="bob"] .badge.online')
    page.wait_for_selector('#agents tr[data-agent="echo"] .badge.online')
    # Only agents that can chat are offered as members: not the tool-only echo agent.
    offered = page.locator("#new-members input").evaluate_all("boxes => boxes.map(b => b.value)")
    assert sorted(offered) == ["alice", "bob"]
    page.fill("#new-topic", "Should a five-person team start with microservices?")
    page.check('#new-members input[value="alice"]')
    page.check('#new-members input[value="bob"]')
    page.fill("#new-max-turns", "6")
    page.click("#start")
    page.wait_for_selector("#transcript .message.writing")  # a reply being written
    screenshot(page, "room-writing")
    page.wait_for_selector("#stop-reason:not([hidden])", timeout=30_000)
    assert "MAX_TURNS" in page.inner_text("#stop-reason")
    messages = page.locator("#transcript .message:not(.writing)")
    assert messages.count() == 6
    assert messages.nth(0).locator(".name").inner_text() == "Alice"
    assert messages.nth(1).locator(".name").inner_text() == "Bob"
    assert "turn 2" in messages.nth(1).inner_text() and "critic" in messages.nth(1).inner_text()
    colours = {messages.nth(i).evaluate("e => e.style.getPropertyValue('--who')") for i in (0, 1)}
    assert len(colours) == 2, "each member has its own colour"
    assert page.locator("#chart circle").count() == 6
    assert page.inner_text("#room-status") == "stopped"
    assert page.locator("#rooms li .badge.stopped").count() == 1
    screenshot(page, "room-finished")


def test_pause_resume_and_stop_from_the_page(page: Any, echo_daemon: LiveDaemon) -> None:
    with _client(echo_daemon) as http:
        spec = {"id": "steer", "topic": "Tea or coffee?", "members": ["alice", "bob"]}
        assert http.post("/rooms", json=spec).status_code == 201
    _open(page, echo_daemon, "room=steer")
    page.wait_for_selector("#transcript .message:not(.writing)")
    page.click("#pause")
    page.wait_for_selector("#room-status.paused")
    page.wait_for_selector("#stop-reason:has-text('PAUSED')")
    held = page.locator("#transcript .message:not(.writing)").count()
    page.click("#resume")
    page.wait_for_selector("#room-status.running")
    page.wait_for_selector(f"#transcript .message:not(.writing) >> nth={held}")
    page.click("#stop")
    page.wait_for_selector("#room-status.stopped")
    page.wait_for_selector("#stop-reason:has-text('STOPPED')")
    assert page.is_disabled("#resume") and page.is_disabled("#pause")


def test_a_person_joins_from_the_page_and_the_next_persona_answers(
    page: Any, echo_daemon: LiveDaemon
) -> None:
    with _client(echo_daemon) as http:
        spec: dict[str, object] = {"id": "visit", "topic": "Tea or coffee?"}
        spec |= {"members": ["alice", "bob"], "limits": LONG_LIMITS}
        assert http.post("/rooms", json=spec).status_code == 201
    _open(page, echo_daemon, "room=visit")
    page.fill("#join-name", "Carol")
    page.click("#join")
    # Beside a person, the token that holds the seat (the page signed in with the admin's).
    page.wait_for_selector("#transcript .joined:has-text('Carol joined (token admin)')")
    page.wait_for_selector("#say-hint.your-turn", timeout=30_000)
    page.fill("#say-text", "Milk first, obviously.")
    page.click("#say")
    # The first answer; later ones quote it again ("Alice said: Carol said: ...").
    answer = page.locator(
        "#transcript .message", has_text="Carol said: Milk first, obviously."
    ).first
    answer.wait_for()
    assert answer.locator(".name").inner_text() in {"Alice", "Bob"}
    # The rooms list follows the open room: its turn is the last message's (read at once).
    listed, last = page.evaluate(
        """() => [document.querySelector('#rooms li[data-room="visit"] .turn').textContent,
                  [...document.querySelectorAll('#transcript .message:not(.writing)')].pop()
                      .dataset.turn]"""
    )
    assert listed == f"turn {last}"
    mine = page.locator('#transcript .message.person:not(.waiting)[data-agent="carol"]')
    assert mine.locator(".text").inner_text() == "Milk first, obviously."
    screenshot(page, "room-person")
    page.click("#leave")
    page.wait_for_selector("#join-form:not([hidden])")


def test_text_from_an_agent_is_shown_as_text_never_run(page: Any, tmp_path: Path) -> None:
    scripts = {
        "alice": ("Alice", "participant", [HOSTILE]),
        "bob": ("Bob <i>the</i> critic", "critic", ["plain words"]),
    }
    daemon = start_daemon(tmp_path, scripts, backend="asyncio", delay=0.0)
    try:
        with _client(daemon) as http:
            spec: dict[str, object] = {"id": "xss", "topic": "<script>alert(1)</script>"}
            spec |= {"members": ["alice", "bob"], "limits": {"max_turns": 2}}
            assert http.post("/rooms", json=spec).status_code == 201
        _open(page, daemon, "room=xss")
        page.wait_for_selector("#stop-reason:not([hidden])")
        first = page.locator("#transcript .message").nth(0)
        assert first.locator(".text").inner_text() == HOSTILE
        assert page.locator("#transcript img, #transcript script, #transcript b").count() == 0
        assert page.inner_text("#room-topic") == "<script>alert(1)</script>"
        assert re.search(r"Bob <i>the</i> critic", page.inner_text("#transcript"))
        assert page.evaluate("window.__pwned") is None
    finally:
        stop_daemon(daemon)


def test_the_page_signs_in_with_a_token_over_tls(chromium: Any, tmp_path: Path) -> None:
    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1", "localhost")
    cert, key, bundle = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    issued.private_key_pem.write_to_path(str(key))
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    authority.cert_pem.write_to_path(str(bundle))
    scripts = {"alice": ("Alice", "participant", ECHO), "bob": ("Bob", "participant", ECHO)}
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    daemon = start_daemon(
        tmp_path, scripts, backend="asyncio", delay=0.0, extra_args=tls, ca=str(bundle)
    )
    # The test's own CA is not in Chromium's store: the context accepts it instead.
    context = chromium.new_context(ignore_https_errors=True)
    context.set_default_timeout(20_000)
    try:
        assert daemon.url.startswith("https://") and daemon.token
        page = context.new_page()
        page.goto(daemon.page_url())
        page.wait_for_selector("#signin:not([hidden])")
        page.fill("#token", "mesh_not-a-token")
        page.click("#signin-form button")
        page.wait_for_selector("#signin-error:has-text('token')")
        screenshot(page, "signin")
        page.fill("#token", daemon.token)
        page.click("#signin-form button")
        page.wait_for_selector('#agents tr[data-agent="alice"] .badge.online')  # over wss://
        with httpx.Client(
            base_url=daemon.url,
            headers={"authorization": f"Bearer {daemon.token}"},
            verify=ssl.create_default_context(cafile=str(bundle)),
        ) as http:
            spec = {"id": "secure", "topic": "Tea over TLS?", "members": ["alice", "bob"]}
            assert http.post("/rooms", json=spec | {"limits": {"max_turns": 2}}).status_code == 201
        page.click('#rooms li[data-room="secure"]')
        page.wait_for_selector("#stop-reason:has-text('MAX_TURNS')")
        page.locator("#transcript .message").nth(1).wait_for()  # the history, over wss://
        page.wait_for_selector("#transcript .event.stopped")
        assert page.locator("#transcript .message").count() == 2
    finally:
        context.close()
        stop_daemon(daemon)
