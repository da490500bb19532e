"""The room page tells the truth through a reload and a daemon restart mid-reply, with a person
in the room; and a reply already being written when the page opens is shown whole."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.integration._daemon import LONG_LIMITS

from .conftest import LiveDaemon, start_again, start_daemon, stop_daemon

ALICE = ["Alpha: one deployable with clear module boundaries, and split out only what must scale."]
BOB = ["Bravo: boundaries erode unless a check in CI keeps them, so add that check first."]
LINES = ALICE + BOB
#: Seconds per reply, spread over its words: slow enough to catch one being written.
SLOW = 6.0


@pytest.fixture
def slow_daemon(tmp_path: Path) -> Iterator[LiveDaemon]:
    scripts = {"alice": ("Alice", "architect", ALICE), "bob": ("Bob", "critic", BOB)}
    live = start_daemon(tmp_path, scripts, backend="trio", delay=SLOW)
    try:
        yield live
    finally:
        stop_daemon(live)


def _room(daemon: LiveDaemon, room_id: str) -> None:
    spec: dict[str, object] = {"id": room_id, "topic": "Monolith first?"}
    spec["members"] = ["alice", "bob"]
    spec |= {"limits": LONG_LIMITS, "people": {"turn_timeout": 600}}
    headers = {"authorization": f"Bearer {daemon.token}"}
    with httpx.Client(base_url=daemon.url, headers=headers, timeout=20) as http:
        assert http.post("/rooms", json=spec).status_code == 201


def _sign_in(page: Any, daemon: LiveDaemon, fragment: str) -> None:
    page.goto(daemon.page_url(fragment))
    page.fill("#token", daemon.token or "")
    page.click("#signin-form button")
    page.wait_for_selector("#connection.online")


def _wait_for_words(daemon: LiveDaemon, room_id: str) -> None:
    """Until the first reply of ``room_id`` has begun to be written (a DELTA with text)."""
    url = "ws" + daemon.url.removeprefix("http") + f"/rooms/{room_id}/events?deltas=1"
    protocols: Any = ["mesh", f"bearer.{daemon.token}"]
    with connect(url, subprotocols=protocols, open_timeout=30) as events:
        for _ in range(1000):
            event = json.loads(events.recv(timeout=30))
            if event["type"] == "DELTA" and event["text"]:
                return
    raise AssertionError("no words were written")


def _writing_shows_the_reply_from_its_start(page: Any) -> None:
    writing = page.locator("#transcript .message.writing").first
    writing.locator(".text:not(:empty)").wait_for()
    assert writing.locator(".text").inner_text().startswith("Alpha:")
    head = writing.locator(".head").inner_text()
    assert re.search(r"\d\d:\d\d:\d\d", head) and "00:00:00" not in head


@pytest.mark.timeout(300)  # a real browser and daemon on a loaded machine
def test_a_reply_being_written_shows_whole_on_opening_and_after_a_reload(
    page: Any, slow_daemon: LiveDaemon
) -> None:
    _room(slow_daemon, "opened")
    _wait_for_words(slow_daemon, "opened")
    _sign_in(page, slow_daemon, "room=opened")
    _writing_shows_the_reply_from_its_start(page)
    page.reload()
    _writing_shows_the_reply_from_its_start(page)


@pytest.mark.timeout(300)  # a real browser and daemon on a loaded machine
def test_a_daemon_restart_mid_reply_with_a_person_in_the_room(
    page: Any, slow_daemon: LiveDaemon
) -> None:
    # A daemon restart on a loaded machine: every wait of this walk gets a minute.
    page.set_default_timeout(60_000)
    sockets: list[str] = []
    console: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    page.on("console", lambda message: console.append(message.text))
    _room(slow_daemon, "restart")
    _sign_in(page, slow_daemon, "room=restart")
    page.fill("#join-name", "Carol")
    page.click("#join")
    page.wait_for_selector("#transcript .joined:has-text('Carol joined')")
    page.wait_for_selector("#transcript .message.writing .text:not(:empty)", timeout=60_000)
    stop_daemon(slow_daemon)
    # Down: the page says so, and shows nothing as live that is not.
    page.wait_for_selector("#connection:text-is('reconnecting')")
    page.wait_for_selector("#offline:not([hidden])")
    page.wait_for_selector("#room-status:text-is('unknown')")
    page.wait_for_selector('#agents tr[data-agent="alice"] .badge.unknown')
    page.wait_for_selector("#transcript .message.writing", state="detached")
    page.fill("#say-text", "Still there?")
    page.press("#say-text", "Enter")
    page.wait_for_selector("#room-error:has-text('the daemon is not reachable')")
    assert page.input_value("#say-text") == "Still there?"  # nothing lost
    start_again(slow_daemon)
    # Back: online, the error gone, the room running, and Carol in it again.
    page.wait_for_selector("#connection:text-is('online')", timeout=60_000)
    page.wait_for_selector("#offline", state="hidden")
    page.wait_for_selector("#room-status:text-is('running')")
    # Locators, not wait_for_function: its polling evaluates a string, which the page's CSP
    # (no 'unsafe-eval') refuses whenever the first look is not already true.
    page.locator("#room-error", has_text=re.compile(r"\S")).wait_for(state="detached")
    assert "Failed to fetch" not in page.inner_text("body")
    # Carol takes her seat again (the second "joined"), however late it reaches the page.
    page.locator("#transcript .joined", has_text="Carol joined").nth(1).wait_for()
    # The reply asked again starts afresh, never on top of the half one.
    writing = page.locator("#transcript .message.writing .text:not(:empty)").first
    writing.wait_for(timeout=60_000)
    text = writing.inner_text()
    assert any(line.startswith(text.strip()) for line in LINES), text
    page.wait_for_selector("#say-hint.your-turn", timeout=90_000)  # still in the speaking order
    page.press("#say-text", "Enter")
    page.locator('#transcript .message.person:not(.waiting)[data-agent="carol"]').first.wait_for()
    # The token never shows in a WebSocket's URL, nor in the console.
    assert sockets and not any("token" in url for url in sockets), sockets
    assert not any(str(slow_daemon.token) in line for line in console)


@pytest.mark.timeout(300)  # a real browser and daemon on a loaded machine
def test_while_the_daemon_is_down_the_say_hint_does_not_promise_a_send(
    page: Any, slow_daemon: LiveDaemon
) -> None:
    page.set_default_timeout(60_000)
    _room(slow_daemon, "hint")
    _sign_in(page, slow_daemon, "room=hint")
    page.fill("#join-name", "Dana")
    page.click("#join")
    page.wait_for_selector("#say-hint:has-text('Dana')")
    stop_daemon(slow_daemon)
    page.wait_for_selector("#connection:text-is('reconnecting')")
    assert page.is_disabled("#say")
    hint = page.inner_text("#say-hint")
    assert "between turns" not in hint and "Your turn" not in hint, hint
    assert "not reachable" in hint, hint
    start_again(slow_daemon)
    page.wait_for_selector("#connection:text-is('online')")
    page.wait_for_selector("#say-hint:not(:has-text('not reachable'))")
