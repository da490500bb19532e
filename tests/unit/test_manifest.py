"""Manifests: every transport decodes, every default holds, every error names file, path, reason."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import msgspec
import pytest

import mesh
from mesh import (
    DialInSection,
    HttpSection,
    Manifest,
    ManifestError,
    Persona,
    StdioSection,
    WebSocketSection,
    load_manifest,
    load_manifests,
)
from mesh.manifests import ValidateExit, validate_manifests
from mesh.providers import ProviderConfig

ROOT = Path(__file__).resolve().parents[2]

STDIO = """\
id = "echo"
[transport]
type = "stdio"
command = "python"
args = ["-m", "mesh.agents.echo", "--stdio"]
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str, name: str = "broken.toml") -> ManifestError:
    path = write(tmp_path, name, text)
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert caught.value.file == path
    assert str(caught.value).startswith(f"{path}: ")
    return caught.value


# -- good manifests ----------------------------------------------------------------------


def test_stdio_manifest_and_every_default(tmp_path: Path) -> None:
    manifest = load_manifest(write(tmp_path, "echo.toml", STDIO))
    assert manifest == Manifest(
        id="echo",
        transport=StdioSection(command=sys.executable, args=("-m", "mesh.agents.echo", "--stdio")),
    )
    assert manifest.name == "echo"
    assert manifest.description == ""
    assert manifest.version == "0.1.0"
    assert manifest.capabilities == ()
    assert manifest.heartbeat_interval == 10.0
    assert manifest.heartbeat_ttl == 30.0 == manifest.heartbeat_ttl
    assert manifest.call_timeout == 30.0
    assert manifest.max_frame_size == 1024 * 1024
    assert manifest.persona is None
    assert manifest.metadata == {}
    transport = manifest.transport
    assert isinstance(transport, StdioSection)
    assert (transport.env, transport.cwd) == ({}, None)
    assert transport.token({}) is None


def test_every_field_of_a_full_manifest(tmp_path: Path) -> None:
    text = """\
id = "bob.critic-2"
name = "Bob"
description = "Finds the holes."
version = "1.2.3"
capabilities = ["chat", "review"]
heartbeat_interval = 2
heartbeat_ttl = 5.5
call_timeout = 90
max_frame_size = 65536
metadata = { team = "red" }

[transport]
type = "dial-in"
token_env = "BOB_TOKEN"

[persona]
system_prompt = "You are Bob."
role = "critic"
awareness = "high"

[persona.provider]
provider = "scripted"
script = ["Verified."]
"""
    manifest = load_manifest(write(tmp_path, "bob.toml", text))
    assert manifest == Manifest(
        id="bob.critic-2",
        name="Bob",
        description="Finds the holes.",
        version="1.2.3",
        capabilities=("chat", "review"),
        heartbeat_interval=2.0,
        heartbeat_ttl=5.5,
        call_timeout=90.0,
        max_frame_size=65536,
        metadata={"team": "red"},
        transport=DialInSection(token_env="BOB_TOKEN"),
        persona=Persona(
            system_prompt="You are Bob.",
            role="critic",
            awareness="high",
            provider=ProviderConfig(provider="scripted", script=("Verified.",)),
        ),
    )
    assert manifest.transport.token({"BOB_TOKEN": "s3cret"}) == "s3cret"


def test_persona_defaults(tmp_path: Path) -> None:
    text = STDIO + '[persona]\nsystem_prompt = "Hi."\n[persona.provider]\nprovider = "ollama"\n'
    persona = load_manifest(write(tmp_path, "p.toml", text + 'model = "llama3.2"\n')).persona
    assert persona is not None
    assert (persona.role, persona.awareness) == ("participant", "intermediate")
    assert persona.provider.model == "llama3.2"


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8701", "https://agents.example/x"])
def test_http_manifest(tmp_path: Path, endpoint: str) -> None:
    text = f'id = "h"\n[transport]\ntype = "http"\nendpoint = "{endpoint}"\n'
    transport = load_manifest(write(tmp_path, "h.toml", text)).transport
    assert transport == HttpSection(endpoint=endpoint)
    assert transport.token({}) is None


def test_http_manifest_with_token(tmp_path: Path) -> None:
    text = 'id = "h"\n[transport]\ntype = "http"\nendpoint = "http://h"\ntoken_env = "H_TOKEN"\n'
    transport = load_manifest(write(tmp_path, "h.toml", text)).transport
    assert transport.token({"H_TOKEN": "abc"}) == "abc"


@pytest.mark.parametrize("endpoint", ["ws://127.0.0.1:8702/ws", "wss://agents.example/ws"])
def test_websocket_manifest(tmp_path: Path, endpoint: str) -> None:
    text = f'id = "w"\n[transport]\ntype = "websocket"\nendpoint = "{endpoint}"\ntoken_env = "W"\n'
    transport = load_manifest(write(tmp_path, "w.toml", text)).transport
    assert transport == WebSocketSection(endpoint=endpoint, token_env="W")
    assert transport.token({"W": "tok"}) == "tok"


@pytest.mark.parametrize("command", ["python", "python3"])
def test_python_means_the_running_interpreter(command: str) -> None:
    assert StdioSection(command=command).command == sys.executable
    assert StdioSection(command="/usr/bin/python").command == "/usr/bin/python"
    assert StdioSection(command="python3.11").command == "python3.11"


def test_relative_cwd_is_resolved_against_the_manifest_directory(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    relative = write(tmp_path / "agents", "r.toml", STDIO + 'cwd = "../work"\n')
    absolute = write(tmp_path / "agents", "a.toml", STDIO + 'cwd = "/srv/agent"\n')
    transport = load_manifest(relative).transport
    assert isinstance(transport, StdioSection)
    assert transport.cwd == str((tmp_path / "work").resolve())
    transport = load_manifest(absolute).transport
    assert isinstance(transport, StdioSection)
    assert transport.cwd == "/srv/agent"


def test_home_in_cwd_expands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    transport = load_manifest(write(tmp_path, "h.toml", STDIO + 'cwd = "~/agent"\n')).transport
    assert isinstance(transport, StdioSection)
    assert transport.cwd == str((tmp_path / "home" / "agent").resolve())


def test_manifest_round_trips_through_msgspec() -> None:
    manifest = Manifest(id="a", transport=DialInSection(token_env="A"))
    encoded = msgspec.json.encode(manifest)
    assert b'"type":"dial-in"' in encoded
    assert msgspec.json.decode(encoded, type=Manifest) == manifest


# -- errors: file + path + reason --------------------------------------------------------


def test_toml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    error = error_of(tmp_path, 'id = "x"\ncall_timeout = \n')
    assert error.field is None
    assert "invalid TOML" in error.reason
    assert "line 2, column 16" in error.reason


def test_wrong_type_names_the_path(tmp_path: Path) -> None:
    error = error_of(tmp_path, STDIO.replace('id = "echo"', 'id = "e"\nheartbeat_interval = "x"'))
    assert error.field == "$.heartbeat_interval"
    assert error.reason == "Expected `float`, got `str`"
    assert str(error) == (
        f"{tmp_path / 'broken.toml'}: Expected `float`, got `str` - at `$.heartbeat_interval`"
    )


def test_wrong_type_deep_in_a_table(tmp_path: Path) -> None:
    error = error_of(tmp_path, STDIO + "env = { A = 1 }\n")
    assert (error.field, error.reason) == ("$.transport.env[...]", "Expected `str`, got `int`")


def test_unknown_field_is_an_error_with_a_suggestion(tmp_path: Path) -> None:
    error = error_of(tmp_path, "heartbeat_intervall = 3\n" + STDIO)
    assert error.field == "$"
    assert error.reason == (
        "Object contains unknown field `heartbeat_intervall`; did you mean `heartbeat_interval`?"
    )
    error = error_of(tmp_path, STDIO + 'comand = "x"\n')
    assert error.field == "$.transport"
    assert "unknown field `comand`; did you mean `command`?" in error.reason


def test_a_token_in_the_file_is_refused_without_echoing_it(tmp_path: Path) -> None:
    text = 'id = "w"\n[transport]\ntype = "websocket"\nendpoint = "ws://h/ws"\n'
    pasted = error_of(tmp_path, text + 'token_env = "W"\ntoken = "hunter2"\n')
    assert pasted.field == "$.transport"
    assert "unknown field `token`" in pasted.reason and "`token_env`" in pasted.reason
    as_name = error_of(tmp_path, text + 'token_env = "hunter2-secret"\n')
    assert as_name.field == "$.transport.token_env"
    assert "NAME of an environment variable" in as_name.reason
    in_url = error_of(tmp_path, text.replace("/ws", "/ws?token=hunter2") + 'token_env = "W"\n')
    assert in_url.field == "$.transport.endpoint"
    assert "Credentials do not belong" in in_url.reason
    in_userinfo = error_of(tmp_path, text.replace("//h", "//u:hunter2@h") + 'token_env = "W"\n')
    assert in_userinfo.field == "$.transport.endpoint"
    assert not [e for e in (pasted, as_name, in_url, in_userinfo) if "hunter2" in str(e)]


@pytest.mark.parametrize(
    ("text", "path", "reason"),
    [
        ("[transport]\ntype = 'stdio'\ncommand = 'x'\n", "$", "Object missing required field `id`"),
        ('id = "x"\n', "$", "Object missing required field `transport`"),
        ('id = "x"\n[transport]\ntype = "stdio"\n', "$.transport", "required field `command`"),
        ('id = "x"\n[transport]\ncommand = "p"\n', "$.transport", "required field `type`"),
        (
            'id = "x"\n[transport]\ntype = "websocket"\nendpoint = "ws://h"\n',
            "$.transport",
            "required field `token_env`",
        ),
        (
            STDIO + '[persona]\nsystem_prompt = "Hi."\n',
            "$.persona",
            "Object missing required field `provider`",
        ),
    ],
)
def test_missing_required_field(tmp_path: Path, text: str, path: str, reason: str) -> None:
    error = error_of(tmp_path, text)
    assert error.field == path
    assert reason in error.reason


def test_unknown_transport_type_lists_the_known_ones(tmp_path: Path) -> None:
    error = error_of(tmp_path, 'id = "x"\n[transport]\ntype = "grpc"\n')
    assert error.field == "$.transport.type"
    assert error.reason == (
        "Invalid value 'grpc'; expected one of 'stdio', 'http', 'websocket', 'dial-in'"
    )


@pytest.mark.parametrize("bad_id", ["Echo", "-echo", "echo agent", "écho", "echo\\n"])
def test_bad_id(tmp_path: Path, bad_id: str) -> None:
    error = error_of(tmp_path, STDIO.replace('"echo"', f'"{bad_id}"'))
    assert error.field == "$.id"
    assert error.reason.startswith("Expected lowercase letters, digits")


@pytest.mark.parametrize(("bad_id", "reason"), [("", "length >= 1"), ("a" * 65, "length <= 64")])
def test_id_length(tmp_path: Path, bad_id: str, reason: str) -> None:
    error = error_of(tmp_path, STDIO.replace('"echo"', f'"{bad_id}"'))
    assert (error.field, error.reason) == ("$.id", f"Expected `str` of {reason}")


@pytest.mark.parametrize(
    ("transport", "reason"),
    [
        ('type = "http"\nendpoint = "ws://h"', "http:// or https://, got scheme 'ws'"),
        ('type = "http"\nendpoint = "localhost:8701"', "got no scheme"),
        ('type = "http"\nendpoint = "ftp://h"', "got scheme 'ftp'"),
        ('type = "http"\nendpoint = "localhost"', "got no scheme"),
        ('type = "http"\nendpoint = "http://"', "Expected a URL with a host after http://"),
        ('type = "websocket"\nendpoint = "http://h/ws"\ntoken_env = "T"', "ws:// or wss://"),
    ],
)
def test_bad_endpoint_scheme(tmp_path: Path, transport: str, reason: str) -> None:
    error = error_of(tmp_path, f'id = "x"\n[transport]\n{transport}\n')
    assert error.field == "$.transport.endpoint"
    assert reason in error.reason


@pytest.mark.parametrize(("ttl", "interval"), [(10, 10), (5, 10), (2.5, 3)])
def test_ttl_must_exceed_interval(tmp_path: Path, ttl: float, interval: float) -> None:
    text = f"heartbeat_interval = {interval}\nheartbeat_ttl = {ttl}\n" + STDIO
    error = error_of(tmp_path, text)
    assert error.field == "$.heartbeat_ttl"
    assert error.reason == (
        f"Expected a TTL greater than `heartbeat_interval` ({interval:g} s), got {ttl:g} s"
    )


@pytest.mark.parametrize("field", ["heartbeat_interval", "heartbeat_ttl", "call_timeout"])
def test_durations_must_be_positive(tmp_path: Path, field: str) -> None:
    error = error_of(tmp_path, f"{field} = 0\n" + STDIO)
    assert (error.field, error.reason) == (f"$.{field}", "Expected `float` > 0.0")


def test_provider_errors_keep_their_path(tmp_path: Path) -> None:
    text = STDIO + '[persona]\nsystem_prompt = "Hi."\n[persona.provider]\nprovider = "openai"\n'
    error = error_of(tmp_path, text)
    assert error.field == "$.persona.provider"
    assert "`model` is required" in error.reason


def test_checks_also_run_when_built_in_python() -> None:
    with pytest.raises(ValueError, match=r"`heartbeat_ttl`: Expected a TTL greater"):
        Manifest(id="a", transport=DialInSection(token_env="A"), heartbeat_ttl=1.0)
    with pytest.raises(ValueError, match=r"`endpoint`: Expected a URL starting with ws://"):
        WebSocketSection(endpoint="https://h", token_env="A")


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"missing\.toml: cannot read: No such file"):
        load_manifest(tmp_path / "missing.toml")
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'id = "caf\xe9"\n')
    with pytest.raises(
        ManifestError, match=r"latin1\.toml: not UTF-8 text \(byte 0xe9 at offset 9\)"
    ):
        load_manifest(path)


@pytest.mark.parametrize("transport", ["websocket", "dial-in", "http"])
def test_unset_token_variable_is_named_never_valued(tmp_path: Path, transport: str) -> None:
    endpoint = {"websocket": 'endpoint = "ws://h/ws"\n', "http": 'endpoint = "http://h"\n'}
    text = f'id = "w"\n[transport]\ntype = "{transport}"\n{endpoint.get(transport, "")}'
    path = write(tmp_path, "w.toml", text + 'token_env = "W_TOKEN"\n')
    loaded = load_manifests(tmp_path)
    for environ in ({}, {"W_TOKEN": ""}, {"OTHER": "secret-value"}):
        with pytest.raises(ManifestError) as caught:
            loaded.token("w", environ)
        error = caught.value
        assert (error.file, error.field, error.agent) == (path, "$.transport.token_env", "w")
        assert str(error).startswith(f"{path}: environment variable 'W_TOKEN' is not set")
        assert "secret-value" not in str(error)
        with pytest.raises(ManifestError, match="'W_TOKEN' is not set"):
            loaded.manifests["w"].transport.token(environ)
    assert loaded.token("w", {"W_TOKEN": "t"}) == "t"


def test_token_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = DialInSection(token_env="MESH_TEST_MANIFEST_TOKEN")
    monkeypatch.setenv("MESH_TEST_MANIFEST_TOKEN", "from-env")
    assert transport.token() == "from-env"


# -- directories -------------------------------------------------------------------------


def test_duplicate_ids_name_both_files(tmp_path: Path) -> None:
    first = write(tmp_path, "a.toml", STDIO)
    second = write(tmp_path, "b.toml", STDIO.replace("mesh.agents.echo", "other"))
    loaded = load_manifests(tmp_path)
    assert loaded.sources == {"echo": first}
    assert loaded.manifests["echo"] == load_manifest(first)
    [error] = loaded.errors
    assert (error.file, error.field) == (second, "$.id")
    assert str(error) == (
        f"{second}: duplicate agent id 'echo', already defined in {first} - at `$.id`"
    )


def test_one_broken_file_beside_good_ones(tmp_path: Path) -> None:
    write(tmp_path, "a-good.toml", STDIO.replace('"echo"', '"a"'))
    write(tmp_path, "b-broken.toml", 'heartbeat_interval = "soon"\n' + STDIO)
    write(tmp_path, "c-good.toml", STDIO.replace('"echo"', '"c"'))
    write(tmp_path, "d-syntax.toml", 'id = "d"\n[transport\n')
    write(tmp_path, ".hidden.toml", "not toml at all [")
    write(tmp_path, "notes.txt", "not a manifest")
    (tmp_path / "sub.toml").mkdir()
    loaded = load_manifests(tmp_path)
    assert list(loaded.manifests) == ["a", "c"]
    assert not loaded.ok
    assert [str(e) for e in loaded.errors] == [
        f"{tmp_path / 'b-broken.toml'}: Expected `float`, got `str` - at `$.heartbeat_interval`",
        f"{tmp_path / 'd-syntax.toml'}: invalid TOML: Expected ']' at the end of a table "
        "declaration (at line 2, column 11)",
    ]


def test_empty_and_missing_directories(tmp_path: Path) -> None:
    loaded = load_manifests(tmp_path)
    assert (loaded.manifests, loaded.errors, loaded.sources, loaded.ok) == ({}, [], {}, True)
    with pytest.raises(ManifestError, match=r"nope: cannot read directory: No such file"):
        load_manifests(tmp_path / "nope")


def test_paths_are_reported_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "manifests").mkdir()
    write(tmp_path / "manifests", "broken.toml", "id = 7\n")
    monkeypatch.chdir(tmp_path)
    [error] = load_manifests("manifests").errors
    assert str(error) == "manifests/broken.toml: Expected `str`, got `int` - at `$.id`"


# -- what ships ----------------------------------------------------------------------------


def test_shipped_manifests_validate_cleanly() -> None:
    loaded = load_manifests(ROOT / "manifests")
    assert loaded.errors == []
    assert set(loaded.manifests) == {"echo-stdio", "echo-http", "echo-ws"}
    stdio = loaded.manifests["echo-stdio"].transport
    assert stdio == StdioSection(command=sys.executable, args=("-m", "mesh.agents.echo", "--stdio"))
    assert loaded.manifests["echo-http"].transport == HttpSection(endpoint="http://127.0.0.1:8701")
    assert loaded.manifests["echo-ws"].transport == WebSocketSection(
        endpoint="ws://127.0.0.1:8702/ws", token_env="ECHO_WS_TOKEN"
    )
    for manifest in loaded.manifests.values():
        assert set(manifest.capabilities) >= {"echo", "test"}


def test_validate_report_and_exit_codes(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert validate_manifests(ROOT / "manifests", out=out, err=err, environ={}) == ValidateExit.OK
    assert out.getvalue().splitlines()[-1] == "3 valid, 0 invalid"
    assert "echo-ws.toml: environment variable 'ECHO_WS_TOKEN' is not set" in err.getvalue()

    write(tmp_path, "good.toml", STDIO)
    write(tmp_path, "bad.toml", "call_timeout = -1\n" + STDIO.replace('"echo"', '"bad"'))
    out, err = io.StringIO(), io.StringIO()
    assert validate_manifests(tmp_path, out=out, err=err, environ={}) == ValidateExit.INVALID
    assert f"ok  {tmp_path / 'good.toml'}  echo  stdio" in out.getvalue()
    assert err.getvalue() == (
        f"error: {tmp_path / 'bad.toml'}: Expected `float` > 0.0 - at `$.call_timeout`\n"
    )
    assert out.getvalue().splitlines()[-1] == "1 valid, 1 invalid"

    err = io.StringIO()
    status = validate_manifests(tmp_path / "nope", out=io.StringIO(), err=err)
    assert status == ValidateExit.UNREADABLE
    assert err.getvalue().startswith(f"error: {tmp_path / 'nope'}: cannot read directory")


def test_public_names() -> None:
    names = {"Manifest", "ManifestError", "ManifestSet", "load_manifest", "load_manifests"}
    assert names <= set(mesh.__all__)
    assert issubclass(ManifestError, mesh.MeshError)


def test_validate_reports_every_error_of_a_file(tmp_path: Path) -> None:
    write(
        tmp_path,
        "bad.toml",
        """\
id = "Bad Id"
nmae = "x"
call_timeout = -1
capabilities = ["chat", 3]

[transport]
type = "http"
endpoint = "localhost:8701"
token_env = "my token"

[persona]
system_prompt = ""
[persona.provider]
provider = "openai"
""",
    )
    out, err = io.StringIO(), io.StringIO()
    assert validate_manifests(tmp_path, out=out, err=err, environ={}) == ValidateExit.INVALID
    bad = tmp_path / "bad.toml"
    lines = err.getvalue().splitlines()
    assert all(line.startswith(f"error: {bad}: ") for line in lines)
    found = {line.rsplit(" - at ", 1)[1] for line in lines}
    assert found == {
        "`$`",  # the unknown field, with its likely spelling
        "`$.id`",
        "`$.call_timeout`",
        "`$.capabilities[1]`",
        "`$.transport.endpoint`",
        "`$.transport.token_env`",
        "`$.persona.system_prompt`",
        "`$.persona.provider`",
    }
    assert "unknown field `nmae`; did you mean `name`?" in err.getvalue()
    assert out.getvalue().splitlines() == ["0 valid, 1 invalid"]


def test_validate_reports_every_error_before_the_id_is_fixed_and_each_once(
    tmp_path: Path,
) -> None:
    body = (
        '[transport]\ntype = "stdio"\ncommand = "no-such-agent-program-1234"\ncwd = "gone"\n'
        '[persona]\nsystem_prompt = ""\n'
    )
    write(tmp_path, "x.toml", body)
    err = io.StringIO()
    assert validate_manifests(tmp_path, out=io.StringIO(), err=err, environ={}) == 1
    without_id = err.getvalue().splitlines()
    write(tmp_path, "x.toml", f'id = "x"\n{body}')
    err = io.StringIO()
    assert validate_manifests(tmp_path, out=io.StringIO(), err=err, environ={}) == 1
    with_id = err.getvalue().splitlines()
    missing = f"error: {tmp_path / 'x.toml'}: Object missing required field `id` - at `$`"
    assert sorted(without_id) == sorted([missing, *with_id])
    fields = {line.rsplit(" - at ", 1)[1] for line in with_id}
    assert fields == {
        "`$.transport.cwd`",
        "`$.transport.command`",
        "`$.persona.system_prompt`",
        "`$.persona`",  # its provider is missing
    }, with_id


def test_validate_reports_a_broken_transport_table_and_still_checks_the_id(tmp_path: Path) -> None:
    write(tmp_path, "bad.toml", 'id = "UPPER"\n[transport]\ntype = "ftp"\n')
    err = io.StringIO()
    assert validate_manifests(tmp_path, out=io.StringIO(), err=err) == ValidateExit.INVALID
    text = err.getvalue()
    assert "Invalid value 'ftp'; expected one of 'stdio', 'http', 'websocket', 'dial-in'" in text
    assert "got 'UPPER' - at `$.id`" in text
    assert len(text.splitlines()) == 2


def test_validate_checks_that_a_stdio_command_and_its_cwd_exist(tmp_path: Path) -> None:
    stdio = '[transport]\ntype = "stdio"\n'
    write(tmp_path, "a.toml", f'id = "a"\n{stdio}command = "no-such-agent-program-1234"\n')
    write(tmp_path, "b.toml", f'id = "b"\n{stdio}command = "python"\ncwd = "gone"\n')
    write(tmp_path, "c.toml", f'id = "c"\n{stdio}command = "./agent.sh"\ncwd = "."\n')
    (tmp_path / "agent.sh").write_text("#!/bin/sh\n")  # not executable (yet)
    write(tmp_path, "d.toml", f'id = "d"\n{stdio}command = "./missing.sh"\ncwd = "."\n')
    out, err = io.StringIO(), io.StringIO()
    assert validate_manifests(tmp_path, out=out, err=err, environ={}) == ValidateExit.INVALID
    assert err.getvalue().splitlines() == [
        f"error: {tmp_path / 'a.toml'}: command 'no-such-agent-program-1234' is not found on PATH"
        " - at `$.transport.command`",
        f"error: {tmp_path / 'b.toml'}: `cwd` '{tmp_path / 'gone'}' does not exist"
        " - at `$.transport.cwd`",
        f"error: {tmp_path / 'c.toml'}: command './agent.sh' is not executable"
        f" (chmod +x {tmp_path / 'agent.sh'}) - at `$.transport.command`",
        f"error: {tmp_path / 'd.toml'}: command './missing.sh' does not exist"
        f" (looked for {tmp_path / 'missing.sh'}) - at `$.transport.command`",
    ]
    assert out.getvalue().splitlines() == ["0 valid, 4 invalid"]
    (tmp_path / "agent.sh").chmod(0o755)
    for name in ("a", "b", "d"):
        (tmp_path / f"{name}.toml").unlink()
    out = io.StringIO()
    assert validate_manifests(tmp_path, out=out, err=io.StringIO(), environ={}) == ValidateExit.OK
    assert out.getvalue().splitlines()[-1] == "1 valid, 0 invalid"
