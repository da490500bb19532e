"""A member's question to the room's people, answered from the page: the form built from
its schema, the answer recorded, the member's turn going on with it; axe stays clean with
the form open."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import LiveDaemon, serious_violations, start_daemon, stop_daemon

ASKER = Path(__file__).resolve().parents[1] / "integration" / "_asking_agent.py"
ECHO = ["{speaker} said: {last}"]


@pytest.fixture(params=["asyncio", "trio"])
def daemon(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LiveDaemon]:
    args = json.dumps([str(ASKER), "--stdio"])
    asker = (
        f'id = "asker"\ncapabilities = ["chat"]\n[transport]\ntype = "stdio"\n'
        f"command = {json.dumps(sys.executable)}\nargs = {args}\n"
    )
    scripts = {"alice": ("Alice", "participant", ECHO)}
    live = start_daemon(
        tmp_path, scripts, backend=request.param, delay=0.0, manifests_too={"asker": asker}
    )
    try:
        yield live
    finally:
        stop_daemon(live)


@pytest.mark.timeout(300)  # a real browser and daemon on a loaded machine
def test_a_person_answers_a_members_question_from_the_page(
    chromium: Any, daemon: LiveDaemon
) -> None:
    spec = {
        "id": "shed",
        "topic": "The shed",
        "members": ["asker", "alice"],
        "paused": True,
        "limits": {"max_turns": 2, "turn_timeout": 300},
    }
    headers = {"authorization": f"Bearer {daemon.token}"}
    with httpx.Client(base_url=daemon.url, headers=headers, timeout=20) as http:
        created = http.post("/rooms", json=spec)
        assert created.status_code == 201, created.text
        context = chromium.new_context(viewport={"width": 1280, "height": 860}, bypass_csp=True)
        context.set_default_timeout(30_000)
        try:
            page = context.new_page()
            page.goto(daemon.page_url("room=shed"))
            page.fill("#token", daemon.token or "")
            page.press("#token", "Enter")
            page.wait_for_selector("#connection.online")
            page.fill("#join-name", "Carol")
            page.click("#join")
            page.wait_for_selector("#transcript .joined:has-text('Carol joined')")
            assert http.post("/rooms/shed/resume").status_code == 200
            page.wait_for_selector("#question-form:not([hidden])", timeout=60_000)
            assert page.locator("#question-text").inner_text() == (
                "Asker asks: What colour shall I paint the shed?"
            )
            assert page.locator("#question-fields [data-field='coats']").input_value() == "2"
            assert serious_violations(page) == []
            page.select_option("#question-fields [data-field='colour']", "green")
            page.click("#question-accept")
            page.wait_for_selector(
                "#transcript .event.answer:has-text('Carol answered question q1-1, accept:"
                " colour=green, coats=2')"
            )
            said = page.locator("#transcript .message[data-agent='asker']:not(.writing)")
            assert said.locator(".text").inner_text() == "Painting the shed green, 2 coats."
            page.wait_for_selector("#question-form", state="hidden")
        finally:
            context.close()
