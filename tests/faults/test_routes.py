"""Every route of the real daemon, fed anything: never a 5xx, always an answer that says why.

Bodies, path segments and query strings are drawn by hypothesis: garbage bytes,
JSON of any shape, and objects with the routes' own field names holding values of
the wrong type, size or sign. The daemon is one real ``mesh serve`` process per
backend, with a live echo agent, for the whole module.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mesh.daemon._routes import ROUTES as DAEMON_ROUTES
from mesh.testing import Daemon, spawn_daemon
from tests.unit.test_protocol import json_values

pytestmark = pytest.mark.anyio

LIVE = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

ECHO_MANIFEST = """
id = "echo"
capabilities = ["echo"]
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio"]
"""

#: Every HTTP route of the daemon's own table (so a new route is fuzzed as soon as it is
#: served), plus paths no route has; each ``{…}`` takes a drawn path segment.
ROUTES = [
    *(
        (route.method, re.sub(r"\{\w+\}", "{id}", route.path))
        for route in DAEMON_ROUTES
        if route.method != "WS"
    ),
    ("GET", "/{id}"),
    ("POST", "/{id}/{id}"),
]

#: The routes' own field names, so that bodies get past "unknown field" often.
FIELDS = [
    "id", "name", "endpoint", "transport", "capabilities", "heartbeat_interval",
    "heartbeat_ttl", "metadata", "token", "agent", "method", "params", "timeout",
    "capability", "topic", "members", "mode", "limits", "rules", "policy",
]  # fmt: skip

numbers = (
    st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0, -1])
)
#: Values a field might hold: wrong types, huge and negative numbers, long strings...
values = (
    json_values
    | numbers
    | st.text(min_size=200, max_size=400)
    | st.sampled_from(["echo", "ping", "agent/info", "http://127.0.0.1:9", "ftp://x", ""])
)
objects = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6).map(
    lambda v: json.dumps(v, allow_nan=False).encode()
)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    objects,
    # JSON whose first string holds a byte that is not UTF-8, and nesting past any
    # decoder's depth: each is reported by Python's own errors, not the decoder's.
    objects.filter(lambda b: b'"' in b).map(lambda b: b.replace(b'"', b'"\xff', 1)),
    st.integers(1, 40_000).map(lambda n: b"[" * n + b"]" * n),
)
segments = st.sampled_from(["echo", "nobody", "..", ".", "%", "a/b", "", "events"]) | st.text(
    max_size=40
)
queries = st.dictionaries(st.sampled_from(["since", "token", "agent", "x"]), values.map(str))
methods = st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"])


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Module-scoped, so that one daemon per backend serves every example."""
    return str(request.param)


@dataclass(frozen=True, slots=True)
class Live:
    daemon: Daemon
    http: httpx.AsyncClient


@pytest.fixture(scope="module")
async def live(anyio_backend: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Live]:
    directory: Path = tmp_path_factory.mktemp("routes")
    manifests = directory / "manifests"
    manifests.mkdir()
    (manifests / "echo.toml").write_text(ECHO_MANIFEST)
    data = ["--data-dir", str(directory / "data")]
    async with spawn_daemon(manifests, extra_args=data) as daemon:
        await daemon.wait_online("echo")
        # The daemon's token, once it has one (mesh.testing exposes it).
        token = getattr(daemon, "token", None)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(base_url=daemon.http, headers=headers) as http:
            yield Live(daemon, http)


def _assert_answer_says_why(reply: httpx.Response, what: str) -> None:
    assert reply.status_code < 500, f"{what} -> {reply.status_code} {reply.text}"
    if reply.status_code == 204 or reply.request.method == "HEAD":
        return
    path = reply.request.url.path
    page = path == "/" or path.startswith("/static/") or path == "/metrics"
    if page and reply.status_code == 200:  # the room page (a path like /rooms/.. lands there)
        assert reply.headers["content-type"].startswith(("text/", "image/")), what
        return
    assert reply.headers["content-type"] == "application/json", what
    answer = reply.json()
    if reply.status_code >= 400:
        assert isinstance(answer["error"]["message"], str) and answer["error"]["message"], what


@LIVE
@given(
    route=st.sampled_from(ROUTES),
    method=methods,
    segment=segments,
    query=queries,
    body=bodies,
    own_method=st.booleans(),
)
async def test_no_input_reaches_a_5xx_and_every_refusal_is_json(
    live: Live,
    route: tuple[str, str],
    method: str,
    segment: str,
    query: dict[str, Any],
    body: bytes,
    own_method: bool,
) -> None:
    verb, template = route
    path = template.replace("{id}", quote(segment, safe=""))
    target = path + ("?" + urlencode(query) if query else "")
    what = f"{verb if own_method else method} {target} {body[:80]!r}"
    with anyio.fail_after(20):
        reply = await live.http.request(verb if own_method else method, target, content=body)
    _assert_answer_says_why(reply, what)


async def test_the_daemon_still_serves_after_the_fuzzing(live: Live) -> None:
    with anyio.fail_after(10):
        health = await live.http.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"


#: What a deadline outside the daemon's bound is refused with (max_call_timeout, 300 s).
LIMIT = "outside (0, 300] s"


@pytest.mark.parametrize(
    ("method", "target", "body", "status", "fragment"),
    [
        ("POST", "/rpc", {"agent": "echo", "method": "x" * 257}, 400, "length <= 256"),
        ("POST", "/rpc", {"agent": "echo", "method": "ping", "timeout": 0}, 403, LIMIT),
        ("POST", "/rpc", {"agent": "echo", "method": "ping", "timeout": -1}, 403, LIMIT),
        ("POST", "/rpc", {"agent": "echo", "method": "ping", "timeout": 300.5}, 403, LIMIT),
        ("POST", "/broadcast", {"method": "ping", "timeout": 0}, 403, LIMIT),
        ("GET", "/rooms/x/events?since=abc", None, 400, "since"),
        ("GET", "/rooms/x/events?since=-1", None, 400, "since"),
        ("POST", "/rpc", {"agent": "echo", "method": "x" * 256}, 502, "no method"),
        ("POST", "/rpc", {"agent": "echo", "method": "ping", "timeout": 300}, 200, ""),
    ],
)
async def test_inputs_at_and_past_their_limits(
    live: Live, method: str, target: str, body: Any, status: int, fragment: str
) -> None:
    with anyio.fail_after(20):
        reply = await live.http.request(method, target, json=body)
    assert reply.status_code == status, reply.text
    if status >= 400:
        assert fragment in reply.json()["error"]["message"]
