"""``GET /agents`` a page at a time: what one request may ask, and the clients that follow."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mesh.daemon import _agents
from mesh.daemon._agents import page_of_ids
from mesh.testing import DaemonClient

from ._daemon import serve_in_process

pytestmark = pytest.mark.anyio


def echo_manifest(directory: Path, agent_id: str) -> None:
    """A configured agent the test never starts: listed as configured, not registered."""
    (directory / f"{agent_id}.toml").write_text(
        f'id = "{agent_id}"\n[transport]\ntype = "http"\nendpoint = "http://127.0.0.1:9"\n'
    )


async def register(http: httpx.AsyncClient, ids: list[str]) -> None:
    """Register every id over HTTP, eight requests at a time."""
    left = list(ids)

    async def worker() -> None:
        while left:
            agent_id = left.pop()
            answer = await http.post("/agents/register", json={"id": agent_id})
            assert answer.status_code == 201, answer.text

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(worker)


def test_a_page_is_the_first_ids_after_the_cursor_in_order() -> None:
    ids = ["m", "b", "z", "a", "k"]
    assert page_of_ids(ids, 2, None) == (["a", "b"], True)
    assert page_of_ids(ids, 2, "b") == (["k", "m"], True)
    assert page_of_ids(ids, 2, "m") == (["z"], False)
    assert page_of_ids(ids, 5, None) == (["a", "b", "k", "m", "z"], False)
    assert page_of_ids(ids, 3, "zz") == ([], False)
    assert page_of_ids(ids, 3, "c") == (["k", "m", "z"], False)  # a cursor no agent has


async def test_agents_come_a_page_at_a_time_in_the_order_of_their_ids(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    echo_manifest(manifests, "configured")
    async with serve_in_process(manifests, tmp_path / "data") as daemon, daemon.client() as http:
        registered = [f"agent-{i}" for i in (7, 3, 9, 1, 5)]
        await register(http, registered)
        everyone = sorted([*registered, "configured"])

        seen, after, pages = [], None, 0
        while pages < len(everyone):  # two a page: at most three pages, then one past
            pages += 1
            query = {"limit": "2"} if after is None else {"limit": "2", "after": after}
            page = (await http.get("/agents", params=query)).json()
            assert len(page["agents"]) <= 2
            seen += [agent["id"] for agent in page["agents"]]
            after = page["next"]
            if after is None:
                break
            assert after == seen[-1]
        assert seen == everyone and pages == 3
        configured = (await http.get("/agents", params={"after": "co", "limit": "1"})).json()
        assert configured["agents"][0]["id"] == "configured"
        assert configured["agents"][0]["last_seen_ago"] is None  # configured, never seen

        whole = (await http.get("/agents")).json()
        assert [a["id"] for a in whole["agents"]] == everyone and whole["next"] is None
        past = (await http.get("/agents", params={"after": "zzz"})).json()
        assert past == {"agents": [], "next": None}


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("limit=0", "limit must be a whole number from 1 to 1000"),
        ("limit=1001", "limit must be a whole number from 1 to 1000"),
        ("limit=-1", "limit must be a whole number from 1 to 1000"),
        ("limit=ten", "limit must be a whole number from 1 to 1000"),
        ("limit=%C2%B2", "limit must be a whole number from 1 to 1000"),  # "²" is a digit to str
        ("limit=" + "9" * 5000, "limit must be a whole number from 1 to 1000"),
        ("after=" + "a" * 1025, "after must be a listing's next"),
    ],
)
async def test_a_page_that_cannot_be_asked_is_refused_with_the_reason(
    tmp_path: Path, query: str, says: str
) -> None:
    async with serve_in_process(tmp_path, tmp_path / "data") as daemon, daemon.client() as http:
        answer = await http.get(f"/agents?{query}")
        assert answer.status_code == 400
        assert says in answer.json()["error"]["message"]
        assert (await http.get("/agents")).status_code == 200  # and the daemon goes on


#: The daemon's page, made small here: what the clients prove is that they follow ``next``
#: past a page, which 23 agents show as well as 1,003 did, for a fiftieth of the CPU (each
#: registration is a request to the in-process daemon, traced by coverage).
PAGE = 20


async def test_the_sdk_client_the_cli_and_a_watcher_read_every_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More agents than a page: the SDK client and ``mesh agents`` follow ``next``, and
    ``/agents/events`` sends its snapshot in pages."""
    monkeypatch.setattr(_agents, "AGENTS_PAGE", PAGE)  # the daemon runs in this process
    count = PAGE + 3
    settings = {"max_registrations_per_identity": count + 1}
    async with (
        serve_in_process(tmp_path, tmp_path / "data", **settings) as daemon,
        daemon.client() as http,
    ):
        ids = [f"agent-{i:05d}" for i in range(count)]
        await register(http, ids)
        first = (await http.get("/agents")).json()
        assert len(first["agents"]) == PAGE and first["next"] == ids[PAGE - 1]

        listed = await DaemonClient(http).agents()
        assert [agent["id"] for agent in listed] == ids

        # A watcher's snapshot comes a page to a frame, then the changes.
        async with daemon.open_events("/agents/events") as events:
            frames: list[dict[str, Any]] = []
            with anyio.fail_after(30):
                while not frames or frames[-1]["more"]:  # ends: two pages of 23
                    frames.append(json.loads(await events.receive()))
                    assert len(frames) <= 2
            assert [(f["type"], len(f["agents"])) for f in frames] == [
                ("snapshot", PAGE),
                ("snapshot", 3),
            ]
            assert sorted(a["id"] for f in frames for a in f["agents"]) == ids
            await register(http, ["late"])
            with anyio.fail_after(30):
                change = json.loads(await events.receive())
                # On a loaded machine the first 23 may go stale meanwhile: skip those.
                while change["agent"]["id"] != "late":  # ends: "late" was registered
                    change = json.loads(await events.receive())
            assert change["type"] == "registered"

        env = {**os.environ, "MESH_URL": daemon.http, "MESH_TOKEN": daemon.token}
        with anyio.fail_after(60):
            done = await anyio.run_process(
                [sys.executable, "-m", "mesh.cli", "agents", "--json"], env=env, check=False
            )
        assert done.returncode == 0, done.stderr.decode()
        assert [agent["id"] for agent in json.loads(done.stdout)] == [*ids, "late"]
