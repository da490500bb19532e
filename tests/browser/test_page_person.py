"""The room page as people use it: on a phone, by keyboard alone, as an observer, on a first
visit, and with axe-core's WCAG 2.2 AA scan."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration._daemon import LONG_LIMITS

from .conftest import (
    LiveDaemon,
    remove_every_room,
    screenshot,
    serious_violations,
    start_daemon,
    stop_daemon,
)

ECHO = ["{speaker} said: {last}"]
#: Long enough that the room is still going while the page signs in, joins and answers.
PERSON = {"turn_timeout": 600}


def _client(daemon: LiveDaemon, token: str | None = None) -> httpx.Client:
    headers = {"authorization": f"Bearer {token or daemon.token}"}
    return httpx.Client(base_url=daemon.url, headers=headers, timeout=20)


def _room(daemon: LiveDaemon, room_id: str, max_turns: int | None = None, **extra: object) -> None:
    spec: dict[str, object] = {
        "id": room_id,
        "topic": "Tea or coffee?",
        "members": ["alice", "bob"],
    }
    limits = LONG_LIMITS if max_turns is None else {"max_turns": max_turns}
    spec |= {"limits": limits, "people": PERSON} | extra
    with _client(daemon) as http:
        created = http.post("/rooms", json=spec)
    assert created.status_code == 201, created.text


def _token(daemon: LiveDaemon, role: str, name: str) -> str:
    with _client(daemon) as http:
        created = http.post("/tokens", json={"role": role, "name": name})
    assert created.status_code == 201, created.text
    token: str = created.json()["token"]
    return token


def _sign_in(page: Any, daemon: LiveDaemon, fragment: str = "", token: str | None = None) -> None:
    page.goto(daemon.page_url(fragment))
    page.fill("#token", token or daemon.token or "")
    page.press("#token", "Enter")
    page.wait_for_selector("#app:not([hidden])")
    page.wait_for_selector("#connection.online")


def _no_sideways_scroll(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"the page is {width} px wide"


def _within_screen(page: Any, selector: str) -> None:
    box = page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not shown"
    assert box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"], (selector, box)


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def shared_daemon(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LiveDaemon]:
    """One daemon and its two personas per backend: starting them is most of a test's cost."""
    scripts = {"alice": ("Alice", "participant", ECHO), "bob": ("Bob", "critic", ECHO)}
    directory = tmp_path_factory.mktemp(f"person-{request.param}")
    live = start_daemon(directory, scripts, backend=request.param, delay=0.3)
    try:
        yield live
    finally:
        stop_daemon(live)


@pytest.fixture
def daemon(shared_daemon: LiveDaemon) -> Iterator[LiveDaemon]:
    """The shared daemon with no rooms, before and after the test (its tokens stay: each
    test names its own)."""
    remove_every_room(shared_daemon)
    yield shared_daemon
    remove_every_room(shared_daemon)


@pytest.mark.parametrize("size", [(360, 740), (390, 844)], ids=["360", "390x844"])
@pytest.mark.timeout(300)  # a real browser and daemon on a loaded machine
def test_a_phone_reads_joins_answers_and_pauses(
    chromium: Any, daemon: LiveDaemon, size: tuple[int, int]
) -> None:
    # The same id for both sizes: the second room is made again under the id of the first,
    # deleted after the first test (its personas must not take its turns for stale ones).
    _room(daemon, "phone")
    context = chromium.new_context(viewport={"width": size[0], "height": size[1]}, is_mobile=True)
    context.set_default_timeout(30_000)
    try:
        page = context.new_page()
        _sign_in(page, daemon, "room=phone")
        page.wait_for_selector("#transcript .message:not(.writing)")
        # The open room comes first on a phone, and nothing is wider than the screen.
        room_top = page.locator("#room").bounding_box()["y"]
        assert room_top < page.locator("#rooms").bounding_box()["y"]
        _no_sideways_scroll(page)
        # What comes in does not move the controls under a finger about to tap them.
        join_at = page.locator("#join").bounding_box()
        shown = page.locator("#transcript .message:not(.writing)").count()
        page.wait_for_selector(f"#transcript .message:not(.writing) >> nth={shown + 2}")
        assert page.locator("#join").bounding_box() == join_at
        page.fill("#join-name", "Carol")
        page.click("#join")
        page.wait_for_selector("#say-hint.your-turn", timeout=60_000)
        _no_sideways_scroll(page)
        for control in ("#say-text", "#say", "#pass", "#pause", "#transcript"):
            _within_screen(page, control)
        page.fill("#say-text", "Milk first, obviously.")
        page.click("#say")
        page.locator("#transcript .message", has_text="Carol said: Milk first").first.wait_for()
        if size == (390, 844):
            screenshot(page, "room-phone")
        page.click("#pause")
        page.wait_for_selector("#room-status.paused")
        page.wait_for_selector("#transcript .event.stopped:has-text('paused after turn')")
        assert "PAUSED" not in page.inner_text("#transcript")
        _no_sideways_scroll(page)
    finally:
        context.close()


@pytest.mark.timeout(300)  # a real browser and daemon on a loaded machine
def test_a_turn_that_opens_before_the_join_is_answered_is_still_mine(
    page: Any, daemon: LiveDaemon
) -> None:
    # The events come on the page's socket, the join's answer on a connection of its own:
    # on a busy machine the room can turn to the new person before the page hears that she
    # joined. Holding the answer back until her turn has opened makes that order certain.
    _room(daemon, "race")
    _sign_in(page, daemon, "room=race")
    page.wait_for_selector("#transcript .message:not(.writing)")
    held: list[tuple[Any, Any]] = []
    page.route("**/rooms/race/join", lambda route: held.append((route, route.fetch())))
    page.fill("#join-name", "Erin")
    page.click("#join")
    page.locator('#transcript .message.waiting[data-agent="erin"]').wait_for(timeout=60_000)
    assert len(held) == 1 and not page.is_visible("#say-form")
    route, answer = held[0]
    route.fulfill(response=answer)
    page.wait_for_selector("#say-hint.your-turn")
    assert page.evaluate("document.activeElement.id") == "say-text"
    hint = page.inner_text("#say-hint")
    assert re.search(r"\d+:\d\d left", hint)
    turn = re.search(r"turn (\d+)", hint)
    assert turn is not None, hint
    page.fill("#say-text", "Coffee, black.")
    page.click("#say")
    # Her message is the turn the page offered her (the room may come back to her at once
    # on a busy machine: two short agent turns later it is her turn again).
    mine = page.locator('#transcript .message.person:not(.waiting)[data-agent="erin"]').first
    mine.wait_for()
    assert mine.get_attribute("data-turn") == turn.group(1)
    assert "Coffee, black." in mine.inner_text()


@pytest.mark.timeout(300)  # a real browser and daemon on a loaded machine
def test_keyboard_alone_opens_a_room_joins_and_answers(page: Any, daemon: LiveDaemon) -> None:
    _room(daemon, "keys")
    page.goto(daemon.page_url())
    page.focus("#token")
    page.keyboard.type(daemon.token or "")
    page.keyboard.press("Enter")
    page.wait_for_selector('#rooms li[data-room="keys"] button')
    # The rooms list is reached with Tab, shows where the focus is, and opens with Enter.
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.closest('#rooms li')?.dataset.room") == "keys":
            break
    else:
        pytest.fail("Tab never reached the room in the rooms list")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("none", ""), "the focused room shows no focus ring"
    page.keyboard.press("Enter")
    page.wait_for_selector("#room-topic:has-text('Tea or coffee?')")
    for _ in range(60):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "join-name":
            break
    else:
        pytest.fail("Tab never reached the join box")
    page.keyboard.type("Dora")
    page.keyboard.press("Enter")
    page.wait_for_selector("#say-hint.your-turn", timeout=60_000)
    # Her turn puts the cursor in the box and says so in the tab's title, with a countdown.
    assert page.evaluate("document.activeElement.id") == "say-text"
    assert page.title().startswith("Your turn")
    hint = page.inner_text("#say-hint")
    assert re.search(r"\d+:\d\d left", hint)
    page.keyboard.type("line one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("line two")
    page.keyboard.press("Enter")
    mine = page.locator('#transcript .message.person:not(.waiting)[data-agent="dora"] .text').first
    mine.wait_for()
    assert mine.inner_text() == "line one\nline two"
    # The title no longer offers that turn (on a busy machine the room may already be back
    # at her, two short agent turns later: then it names the later turn).
    if page.title().startswith("Your turn"):
        offered = re.search(r"turn (\d+)", hint)
        now = re.search(r"turn (\d+)", page.inner_text("#say-hint"))
        assert offered and now and int(now.group(1)) > int(offered.group(1))
    page.click("#leave")
    page.wait_for_selector("#transcript .event.left:text-is('Dora left')")


def test_an_observer_is_offered_only_what_it_may_do(page: Any, daemon: LiveDaemon) -> None:
    _room(daemon, "watched")
    _sign_in(page, daemon, "room=watched", token=_token(daemon, "observer", "wall"))
    page.wait_for_selector("#whoami:has-text('signed in as wall (observer)')")
    page.wait_for_selector("#transcript .message:not(.writing)")
    for hidden in ("#new-room-box", "#pause", "#resume", "#stop", "#people"):
        assert page.is_hidden(hidden), f"an observer is offered {hidden}"
    assert page.is_visible("#export-md") and page.is_visible("#rooms li button")


def test_a_first_visit_asks_to_sign_in_quietly_and_a_link_keeps_its_room(
    page: Any, daemon: LiveDaemon
) -> None:
    _room(daemon, "linked", max_turns=2)
    problems: list[str] = []
    page.on("console", lambda m: problems.extend([m.text] if m.type == "error" else []))
    page.on("response", lambda r: problems.extend([f"401 {r.url}"] if r.status == 401 else []))
    with page.expect_response("**/health"):
        page.goto(daemon.page_url())
    page.wait_for_selector("#signin:not([hidden])")
    assert page.inner_text("#signin-error") == ""
    assert page.inner_text("#connection") == "signed out"
    assert problems == []
    # A link made for someone signs in as its maker, when accepted, and opens its room.
    link = _token(daemon, "client", "maker")
    page.goto(daemon.page_url(f"token={link}&room=linked"))
    page.click("#link-accept")
    page.wait_for_selector("#room-topic:has-text('Tea or coffee?')")
    assert "room=linked" in page.url and link not in page.url


@pytest.mark.timeout(300)  # a real browser and daemon on a loaded machine
def test_the_page_has_no_serious_accessibility_violation(chromium: Any, daemon: LiveDaemon) -> None:
    context = chromium.new_context(viewport={"width": 1280, "height": 860}, bypass_csp=True)
    context.set_default_timeout(30_000)
    try:
        page = context.new_page()
        page.goto(daemon.page_url())
        page.wait_for_selector("#signin:not([hidden])")
        assert serious_violations(page) == []
        _room(daemon, "a11y")  # after the first scan, which can take long on a loaded machine
        _sign_in(page, daemon, "room=a11y")
        page.wait_for_selector("#transcript .message:not(.writing)")
        page.fill("#join-name", "Carol")
        page.click("#join")
        page.wait_for_selector("#say-hint.your-turn", timeout=60_000)
        page.click("#new-tuning summary")
        assert serious_violations(page) == []
        page.set_viewport_size({"width": 390, "height": 844})
        assert serious_violations(page) == []
    finally:
        context.close()


def test_the_new_room_form_sets_limits_and_exit_rules(page: Any, daemon: LiveDaemon) -> None:
    _sign_in(page, daemon)
    page.fill("#new-topic", "Tabs or spaces?")
    page.check('#new-members input[value="alice"]')
    page.check('#new-members input[value="bob"]')
    page.fill("#new-max-turns", "9")
    page.click("#new-tuning summary")
    page.fill("#new-per-agent", "4")
    page.fill("#new-turn-timeout", "301")  # past the daemon's max_call_timeout
    page.fill("#new-context", "6")
    page.fill("#new-reply-tokens", "80")
    page.fill("#new-context-tokens", "600")
    page.fill("#new-redraws", "2")
    page.fill("#new-goodbye", "")
    page.fill("#new-threshold", "0.9")
    page.uncheck("#new-no-improvement")
    page.fill("#new-repetition", "1.5")
    page.fill("#new-seed", "1234")
    page.fill("#new-person-timeout", "45")
    page.select_option("#new-at-timeout", "pause")
    page.select_option("#new-join", "clients")
    # Each new setting says what it does, and a value out of bounds is the daemon's to refuse:
    # its error names the setting and the bound, and the field is marked and focused.
    for field in ("reply-tokens", "context-tokens", "redraws", "repetition", "seed"):
        assert page.inner_text(f"#new-{field}-help").strip()
    page.click("#start")
    page.wait_for_selector("#new-error:has-text('rules.repetition_threshold')")
    assert "<= 1" in page.inner_text("#new-error")
    assert page.get_attribute("#new-repetition", "aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "new-repetition"
    page.fill("#new-repetition", "0.7")
    page.fill("#new-seed", "-3")
    page.click("#start")
    page.wait_for_selector("#new-error:has-text('$.seed')")
    assert page.get_attribute("#new-repetition", "aria-invalid") is None
    page.fill("#new-seed", "1234")
    # A deadline past the bound the door holds is marked on its field too, which says the bound.
    assert page.get_attribute("#new-turn-timeout", "max") == "300"
    page.click("#start")
    page.wait_for_selector("#new-error:has-text('(max_call_timeout)')")
    assert page.get_attribute("#new-turn-timeout", "aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "new-turn-timeout"
    page.fill("#new-turn-timeout", "30")
    page.click("#start")
    page.wait_for_selector("#room-topic:has-text('Tabs or spaces?')")
    room_id = page.inner_text("#room-id")
    with _client(daemon) as http:
        room = http.get(f"/rooms/{room_id}").json()["room"]["room"]
    limits = room["limits"]
    shown = [limits[k] for k in ("max_turns", "max_messages_per_agent", "turn_timeout")]
    assert [*shown, limits["context_messages"]] == [9, 4, 30.0, 6]
    assert (limits["reply_tokens"], limits["context_tokens"], limits["redraws"]) == (80, 600, 2)
    rules = room["rules"]
    assert (rules["goodbye"], rules["convergence_threshold"], rules["no_improvement"]) == (
        None, 0.9, False,
    )  # fmt: skip
    assert rules["repetition_threshold"] == 0.7
    assert room["seed"] == 1234
    people = room["people"]
    assert (people["turn_timeout"], people["at_timeout"], people["join"]) == (
        45.0,
        "pause",
        "clients",
    )


def test_the_pages_markdown_export_is_the_clis(
    page: Any, daemon: LiveDaemon, tmp_path: Path
) -> None:
    _room(daemon, "minutes", max_turns=3)
    _sign_in(page, daemon, "room=minutes")
    page.wait_for_selector("#stop-reason:has-text('MAX_TURNS')")
    with page.expect_download() as download:
        page.click("#export-md")
    saved = tmp_path / "page.md"
    download.value.save_as(saved)
    command = [sys.executable, "-m", "mesh.cli", "room", "export", "minutes", "--format", "md"]
    printed = subprocess.run(command, env=daemon.env(), capture_output=True, check=True, timeout=60)
    assert saved.read_bytes() == printed.stdout
