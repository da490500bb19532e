"""The edges of a real daemon's HTTP: what a 401 says, status lines, and what is never logged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from structlog.testing import capture_logs

from mesh.daemon._auth import Right
from mesh.daemon._routes import ROUTES
from mesh.testing import Daemon, spawn_daemon
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.integration._daemon import serve_in_process

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def daemon(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Daemon]:
    async with spawn_daemon(tmp_path_factory.mktemp("edges")) as shared:
        yield shared


#: What each kind of refused Authorization header is told, in WWW-Authenticate.
CHALLENGES = {
    None: 'Bearer realm="mesh", error_description="missing token"',
    "Bearer mesh_not-a-token": (
        'Bearer realm="mesh", error="invalid_token", '
        'error_description="the token is unknown or revoked"'
    ),
    "Basic c3ZjOnB3": (
        'Bearer realm="mesh", error="invalid_request", error_description="use the Bearer scheme"'
    ),
}


async def test_every_401_challenges_for_a_bearer_token_and_says_why(daemon: Daemon) -> None:
    async with httpx.AsyncClient(base_url=daemon.http) as anyone:
        for route in ROUTES:
            if route.right is Right.PUBLIC or route.method == "WS":
                continue
            path = route.path.replace("{id}", "x")
            for authorization, challenge in CHALLENGES.items():
                headers = {} if authorization is None else {"Authorization": authorization}
                reply = await anyone.request(route.method, path, headers=headers)
                assert reply.status_code == 401, (route, reply.text)
                assert reply.headers["www-authenticate"] == challenge, route
        basic = await anyone.get("/agents", headers={"Authorization": "Basic c3ZjOnB3"})
        message = basic.json()["error"]["message"]
        assert "Basic scheme is not accepted" in message and "Bearer" in message
        assert "c3ZjOnB3" not in basic.text


async def test_status_lines_carry_their_reason_phrase(daemon: Daemon) -> None:
    port = int(daemon.http.rsplit(":", 1)[1])
    for request, status in (
        (b"GET /health HTTP/1.1\r\nhost: m\r\n\r\n", b"200 OK\r\n"),
        (b"GET /agents HTTP/1.1\r\nhost: m\r\n\r\n", b"401 Unauthorized\r\n"),
        (b"GET /x HTTP/1.1\r\n\r\n", b"400 Bad Request\r\n"),
    ):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request)
            with anyio.fail_after(10):
                reply = await stream.receive()
        assert reply.startswith(b"HTTP/1.1 " + status), reply[:60]


async def test_a_malformed_request_line_never_puts_its_token_in_the_log(tmp_path: Path) -> None:
    secret = "mesh_never-in-a-log"
    (tmp_path / "manifests").mkdir()
    with capture_logs() as logs:
        async with serve_in_process(tmp_path / "manifests", tmp_path / "data") as daemon:
            port = int(daemon.http.rsplit(":", 1)[1])
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(f"GET /agents?token=Bearer {secret} HTTP/1.1\r\n\r\n".encode())
                with anyio.fail_after(10):
                    reply = await stream.receive()
    assert reply.startswith(b"HTTP/1.1 400 Bad Request")
    assert secret.encode() not in reply
    rejected = [e for e in logs if e["event"] == "http.rejected"]
    assert rejected and rejected[0]["reason"] == "bad request: illegal request line"
    assert secret not in repr(logs)


#: Bodies that no route can read, each of a kind the JSON decoder reports with an error of
#: Python's rather than its own: nesting past its depth, and a string that is not UTF-8.
UNREADABLE = {
    "nested": b"[" * 50_000 + b"]" * 50_000,
    "not utf-8": b'{"name": "\xff", "id": "\xfe", "method": "\xfd"}',
}


async def test_every_route_answers_a_body_it_cannot_read_with_a_4xx(daemon: Daemon) -> None:
    headers = {"content-type": "application/json"}
    async with daemon.client() as admin:
        for route in ROUTES:
            if route.method != "POST":
                continue
            path = route.path.replace("{id}", "x").replace("{agent}", "echo")
            for kind, body in UNREADABLE.items():
                reply = await admin.post(path, content=body, headers=headers)
                assert 400 <= reply.status_code < 500, (route.path, kind, reply.text)
                assert "error" in reply.json(), (route.path, kind)
        # Nothing broke on the way: the daemon still answers.
        assert (await admin.get("/agents")).status_code == 200
