"""The daemon's token store, its identities and rights, and the endpoint rules."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from mesh.daemon._auth import Identities, Identity, Right
from mesh.daemon._limits import check_endpoint, check_id, host_allowed
from mesh.daemon._routes import ROUTES, resolve
from mesh.daemon._serve import _loopback
from mesh.daemon._settings import LOOPBACK
from mesh.daemon._tokens import Role, TokenError, TokenStore, find_token
from transports import HttpRequest, HttpResponse, TokenAuthenticator


def test_first_start_writes_one_admin_token_readable_by_its_owner_only(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    store.load()
    admin_file = store.ensure_admin()
    assert admin_file == tmp_path / "admin.token"
    token = admin_file.read_text().strip()
    assert stat.S_IMODE(admin_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "tokens.json").stat().st_mode) == 0o600
    assert token not in (tmp_path / "tokens.json").read_text()  # only its digest is stored
    entry = store.identify(token)
    assert entry is not None and entry.role is Role.ADMIN
    again = TokenStore(tmp_path)
    again.load()
    assert again.ensure_admin() == admin_file  # no second admin token
    assert len(again.entries()) == 1 and again.identify(token) == entry


def test_a_store_with_client_tokens_creates_no_admin(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    store.create(Role.CLIENT, "ci")
    assert store.ensure_admin() is None and not (tmp_path / "admin.token").exists()


def test_create_identify_revoke(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    entry, token = store.create(Role.OBSERVER, "dashboard")
    assert token.startswith("mesh_") and store.identify(token) == entry
    assert store.identify(token + "x") is None and store.identify("") is None
    agent, agent_token = store.create(Role.AGENT, "bob-token", agent="bob")
    assert store.identify(agent_token) == agent and agent.agent == "bob"
    assert [e.id for e in store.revoke("dashboard")] == [entry.id]
    assert store.identify(token) is None
    reloaded = TokenStore(tmp_path)
    reloaded.load()
    assert [e.name for e in reloaded.entries()] == ["bob-token"]
    with pytest.raises(TokenError, match="no token with id or name 'nope'"):
        store.revoke("nope")
    with pytest.raises(TokenError, match="names its agent id"):
        store.create(Role.AGENT, "x")
    with pytest.raises(TokenError, match="printable"):
        store.create(Role.CLIENT, "bad\x1b[31m")


def test_find_token(tmp_path: Path) -> None:
    assert find_token({"MESH_TOKEN": "t1"}) == "t1"
    assert find_token({}, data_dir=tmp_path) is None
    (tmp_path / "admin.token").write_text("t2\n")
    assert find_token({"MESH_DATA_DIR": str(tmp_path)}) == "t2"
    assert find_token({}, data_dir=tmp_path) == "t2"


def test_a_broken_token_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "tokens.json").write_text(json.dumps({"tokens": [{"id": 1}]}))
    with pytest.raises(TokenError, match=r"tokens.json: .*\$\.tokens\[0\]"):
        TokenStore(tmp_path).load()


def _request(token: str | None) -> HttpRequest:
    headers = (("authorization", f"Bearer {token}"),) if token else ()
    return HttpRequest("GET", "/agents", headers)


def test_gate_identities_and_rights(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    _, observer = store.create(Role.OBSERVER, "eyes")
    identities = Identities(store, TokenAuthenticator({"dial-secret": "bob"}))
    missing = identities.check(_request(None), Right.READ)
    assert isinstance(missing, HttpResponse) and missing.status == 401
    assert json.loads(missing.body)["error"]["missing"] == "token"
    unknown = identities.check(_request("mesh_nope"), Right.READ)
    assert isinstance(unknown, HttpResponse) and unknown.status == 401
    assert b"unknown or revoked" in unknown.body
    who = identities.check(_request(observer), Right.READ)
    assert isinstance(who, Identity) and who.name == "eyes" and who.owner.startswith("token:")
    denied = identities.check(_request(observer), Right.CALL)
    assert isinstance(denied, HttpResponse) and denied.status == 403
    body = json.loads(denied.body)["error"]
    assert body["missing"] == "call" and "held by admin, client" in body["message"]
    agent = identities.identify(_request("dial-secret"))
    assert agent == Identity(role=Role.AGENT, name="bob", agent="bob")
    assert agent.may(Right.DIAL) and not agent.may(Right.READ)


def test_only_health_the_probes_and_the_page_are_public_and_routes_resolve() -> None:
    public = [(r.method, r.path) for r in ROUTES if r.right is Right.PUBLIC]
    assert public == [
        ("GET", "/health"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/"),
        ("GET", "/static/{name}"),
    ]
    found = resolve("GET", "/agents/events")
    assert isinstance(found, HttpResponse) and found.status == 426
    found = resolve("GET", "/agents/bob")
    assert not isinstance(found, HttpResponse) and found[1] == {"id": "bob"}
    found = resolve("PUT", "/agents")
    assert isinstance(found, HttpResponse) and found.status == 405
    found = resolve("GET", "/nowhere")
    assert isinstance(found, HttpResponse) and found.status == 404


def _resolve_by_scan(method: str, path: str) -> tuple[str, dict[str, str]] | int:
    """What `resolve` answers, worked out by trying every route (no index)."""
    parts = tuple(p for p in path.split("/") if p)
    matches = [(r, params) for r in ROUTES if (params := r.match(parts)) is not None]
    if not matches:
        return 404
    best = max(r.literal for r, _ in matches)
    for route, params in matches:
        if route.literal == best and route.method == method:
            return route.name, params
    return 426 if {r.method for r, _ in matches if r.literal == best} == {"WS"} else 405


def test_the_literal_index_resolves_every_path_as_trying_every_route_does() -> None:
    paths = {re.sub(r"\{\w+\}", "x", r.path) for r in ROUTES}
    paths |= {"/mcp/x", "/agents", "/agents/events/x", "/a2a/x/y", "/", "/x/y", "/rooms/x/y"}
    for path in sorted(paths):
        for method in ("GET", "POST", "DELETE", "WS", "PUT"):
            found = resolve(method, path)
            got = found.status if isinstance(found, HttpResponse) else (found[0].name, found[1])
            assert got == _resolve_by_scan(method, path), (method, path)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:9100", None),
        ("https://localhost:9100/agent", None),
        ("http://[::1]:9100", None),
        ("ftp://127.0.0.1/", "http:// or https://"),
        ("http://user:pw@127.0.0.1:9100", "user-info"),
        ("http://127.0.0.1:9100/any/path?x=1", "query string"),
        ("http://127.0.0.1:9100/#top", "fragment"),
        ("http://10.0.0.8:9100", "'10.0.0.8' is not in the daemon's endpoint_hosts"),
        ("http://metadata.internal/", "not in the daemon's endpoint_hosts"),
        ("http://127.0.0.1:99999", "not a valid URL"),
    ],
)
def test_endpoint_rules(url: str, why: str | None) -> None:
    refused = check_endpoint(url, LOOPBACK)
    assert refused is None if why is None else why in (refused or "")


def test_host_allow_list() -> None:
    assert host_allowed("10.1.2.3", ["10.0.0.0/8"]) and not host_allowed("11.0.0.1", ["10.0.0.0/8"])
    assert host_allowed("Agents.Example", ["agents.example"]) and host_allowed("x", ["*"])
    assert not host_allowed("127.1", LOOPBACK)  # not an address as written: not guessed at


def test_agent_ids_follow_the_manifest_rule() -> None:
    assert check_id("echo-2.b_c") is None
    assert "manifest id rule" in (check_id("Echo") or "")
    assert check_id("x" * 65) is not None and check_id("") is not None


def test_only_loopback_addresses_count_as_local() -> None:
    # The daemon warns at start when it listens beyond these without TLS.
    assert _loopback("127.0.0.1") and _loopback("127.8.0.1") and _loopback("::1")
    assert _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("::") and not _loopback("10.0.0.2")
    assert not _loopback("mesh.example")


def test_issuing_tokens_appends_and_rewrites_the_file_a_logarithmic_number_of_times(
    tmp_path: Path,
) -> None:
    store = TokenStore(tmp_path, max_tokens=2_000)
    store.create(Role.CLIENT, "first")
    rewrites, inode = 0, (tmp_path / "tokens.json").stat().st_ino
    issued = {}
    for n in range(1_999):
        entry, token = store.create(Role.CLIENT, f"t{n}")
        issued[token] = entry
        now = (tmp_path / "tokens.json").stat().st_ino
        rewrites, inode = rewrites + (now != inode), now
    assert rewrites <= 12  # each rewrite waits for the journal to match the store: 64, 128, ...
    assert stat.S_IMODE((tmp_path / "tokens.journal").stat().st_mode) == 0o600
    store.revoke("t7")
    store.create(Role.CLIENT, "t2000")  # the room revoking made
    with pytest.raises(TokenError, match=r"holds 2000 tokens \(max_tokens\)"):
        store.create(Role.CLIENT, "t2001")
    reloaded = TokenStore(tmp_path, max_tokens=2_000)
    reloaded.load()  # tokens.json, then the journal over it
    assert len(reloaded.entries()) == len(store.entries())
    assert all(reloaded.identify(t) == e for t, e in issued.items() if e.name != "t7")
    assert reloaded.identify(next(t for t, e in issued.items() if e.name == "t7")) is None


def test_a_torn_last_journal_line_is_dropped_and_a_replay_changes_nothing(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    kept, token = store.create(Role.CLIENT, "kept")
    store.create(Role.CLIENT, "gone")
    store.revoke("gone")
    journal = (tmp_path / "tokens.journal").read_bytes()
    # A crash between a compaction's two writes leaves the journal beside a tokens.json
    # that already holds it, and a crash mid-append leaves half a line.
    (tmp_path / "tokens.journal").write_bytes(journal + journal + b'{"add": {"id"')
    reloaded = TokenStore(tmp_path)
    reloaded.load()
    assert [e.name for e in reloaded.entries()] == ["kept"] and reloaded.identify(token) == kept


def test_a_new_token_never_takes_an_id_another_token_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ids are short (read and typed by people): two may be drawn alike, but a token's id
    # owns rooms and revokes, so the store draws again.
    store = TokenStore(tmp_path)
    first, _ = store.create(Role.CLIENT, "ann")
    drawn = iter([first.id, first.id, "0badc0de"])
    monkeypatch.setattr("mesh.daemon._tokens.secrets.token_hex", lambda _: next(drawn))
    second, _ = store.create(Role.CLIENT, "bob")
    assert second.id == "0badc0de"
    store.revoke(first.id)
    assert [entry.name for entry in store.entries()] == ["bob"]


def test_the_store_says_which_ids_its_agent_tokens_name(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    store.create(Role.AGENT, "bob-token", agent="bob")
    store.create(Role.CLIENT, "ann")
    assert store.names_agent("bob") and not store.names_agent("ann")
    store.revoke("bob-token")
    assert not store.names_agent("bob")
