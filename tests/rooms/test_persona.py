"""The persona agent: one persona, many rooms, each turn spoken at most once; the program."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path

import anyio
import pytest

from mesh import ToolError, open_stdio_peer
from mesh.agents.persona import PersonaAgent, admit, build_agent, main, read_script
from mesh.agents.persona import _parser as persona_parser
from mesh.agents.persona import _Seat as Seat
from mesh.manifests import Persona
from mesh.providers import ChatMessage, Completion, ProviderConfig, ProviderUnreachable
from mesh.rooms import ROLE_PROMPTS, RoomId, TurnReply, TurnRequest, role_persona
from mesh.testing import SPAWN_TIMEOUT
from registry import AgentId

from ._helpers import persona_agent

pytestmark = pytest.mark.anyio


def request(turn: int, room: str = "r1", epoch: str = "") -> TurnRequest:
    return TurnRequest(
        room_id=RoomId(room),
        epoch=epoch,
        turn=turn,
        agent_id=AgentId("bob"),
        system="You are Bob.",
        messages=(ChatMessage(role="user", content="hi", name="Alice"),),
    )


def test_admission_rules() -> None:
    assert admit(None, 7) == "speak"  # a room it has not seen: whatever turn it is at
    answered = Seat(turn=5, reply=TurnReply(room_id=RoomId("r"), turn=5, text="x"), busy=False)
    assert admit(answered, 6) == "speak"
    assert admit(answered, 9) == "speak"  # others spoke in between
    assert admit(answered, 5) == "replay"
    assert admit(answered, 4) == "stale"
    assert admit(Seat(turn=5), 5) == "busy"
    assert admit(Seat(turn=5, busy=False), 5) == "speak"  # the first attempt failed


async def test_a_duplicate_is_replayed_without_asking_the_model_and_a_stale_turn_dropped() -> None:
    bob = persona_agent("bob", "first", "second")
    first = await bob.take_turn(request(2))
    assert (first.status, first.text) == ("spoken", "first")
    duplicate = await bob.take_turn(request(2))
    assert (duplicate.status, duplicate.text) == ("replayed", "first")
    stale = await bob.take_turn(request(1))
    assert (stale.status, stale.text) == ("dropped", "")
    assert stale.reason == "turn 1 is stale: this agent was already asked for turn 2"
    assert len(bob.provider.calls) == 1  # type: ignore[attr-defined]
    assert bob.provider.calls[0].system == f"{ROLE_PROMPTS['participant']}\n\nYou are Bob."  # type: ignore[attr-defined]


async def test_a_room_made_again_under_an_old_id_starts_afresh() -> None:
    """A room deleted and made again under its id (another epoch) is another room: its
    turn 1 is spoken, where the old room's turn 1 would be stale."""
    bob = persona_agent("bob", "old", "new")
    assert (await bob.take_turn(request(3, epoch="100"))).status == "spoken"
    again = await bob.take_turn(request(1, epoch="200"))
    assert again.status == "spoken", again.reason
    stale = await bob.take_turn(request(2, epoch="100"))  # the old room's own rules still hold
    assert stale.status == "dropped"
    assert len(bob.provider.calls) == 2  # type: ignore[attr-defined]


async def test_a_concurrent_duplicate_is_dropped() -> None:
    gate = anyio.Event()

    class Slow:
        config = ProviderConfig(provider="scripted", script=("x",))

        async def complete(
            self,
            messages: object,
            *,
            system: str | None = None,
            on_delta: object = None,
            max_tokens: int | None = None,
            seed: int | None = None,
        ) -> Completion:
            await gate.wait()
            return Completion(text="slow answer", model="m", provider="scripted")

        async def aclose(self) -> None:
            return None

    bob = PersonaAgent("bob", role_persona("critic", Slow.config), provider=Slow())
    replies: list[TurnReply] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: _append(replies, bob.take_turn(request(3))))
        await anyio.wait_all_tasks_blocked()
        second = await bob.take_turn(request(3))
        gate.set()
    assert (second.status, second.reason) == ("dropped", "turn 3 is already being answered")
    assert [(r.status, r.text) for r in replies] == [("spoken", "slow answer")]


async def _append(replies: list[TurnReply], reply: Awaitable[TurnReply]) -> None:
    replies.append(await reply)


async def test_one_persona_sits_in_many_rooms_at_once() -> None:
    bob = persona_agent("bob", "reply {turn}")
    for room in ("r1", "r2", "r3"):
        assert (await bob.take_turn(request(4, room))).status == "spoken"
    assert (await bob.take_turn(request(2, "r1"))).status == "dropped"
    assert (await bob.take_turn(request(1, "r4"))).status == "spoken"


async def test_a_failing_provider_is_a_tool_error_and_the_turn_can_be_retried() -> None:
    class Down:
        config = ProviderConfig(provider="ollama", model="llama3")
        attempts = 0

        async def complete(
            self,
            messages: object,
            *,
            system: str | None = None,
            on_delta: object = None,
            max_tokens: int | None = None,
            seed: int | None = None,
        ) -> Completion:
            self.attempts += 1
            if self.attempts == 1:
                raise ProviderUnreachable("cannot reach it", provider="ollama", model="llama3")
            return Completion(text=" back up ", model="llama3", provider="ollama")

        async def aclose(self) -> None:
            return None

    bob = PersonaAgent("bob", role_persona("critic", Down.config), provider=Down())
    with pytest.raises(ToolError, match="cannot reach") as failed:
        await bob.take_turn(request(2))
    assert failed.value.data == {"type": "ProviderUnreachable"}
    again = await bob.take_turn(request(2))
    assert (again.status, again.text) == ("spoken", "back up")


def test_ready_personas_for_the_seed_roles() -> None:
    config = ProviderConfig(provider="ollama", model="llama3")
    for role in ("architect", "critic", "pragmatist", "participant"):
        persona = role_persona(role, config)
        assert persona.role == role and persona.system_prompt == ROLE_PROMPTS[role]
    assert role_persona("juggler", config).system_prompt == ROLE_PROMPTS["participant"]


def test_script_files_split_on_dashes(tmp_path: Path) -> None:
    script = tmp_path / "bob.txt"
    script.write_text("first reply\nover two lines\n---\nsecond\n---  \n\n")
    assert read_script(script) == ("first reply\nover two lines", "second")
    (tmp_path / "empty.txt").write_text("---\n")
    with pytest.raises(ValueError, match="no replies"):
        read_script(tmp_path / "empty.txt")


def test_flags_build_the_agent_like_seed_000(tmp_path: Path) -> None:
    args = persona_parser().parse_known_args(
        [
            "--name",
            "Bob",
            "--role",
            "critic",
            "--provider",
            "ollama",
            "--model",
            "llama3",
            "--stdio",
        ]
    )
    agent = build_agent(args[0])
    assert args[1] == ["--stdio"]
    assert (agent.id, agent.name, agent.persona.role) == ("bob", "Bob", "critic")
    assert agent.persona.provider == ProviderConfig(provider="ollama", model="llama3")
    assert agent.persona.system_prompt == ROLE_PROMPTS["critic"]
    assert "chat" in agent.capabilities


def test_a_manifest_gives_id_name_and_persona(tmp_path: Path) -> None:
    manifest = tmp_path / "carol.toml"
    manifest.write_text(
        'id = "carol"\nname = "Carol"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
        '[persona]\nsystem_prompt = "You are terse."\nrole = "pragmatist"\nawareness = "high"\n'
        '[persona.provider]\nprovider = "scripted"\nscript = ["ok"]\n'
    )
    args, _ = persona_parser().parse_known_args(
        ["--manifest", str(manifest), "--awareness", "basic"]
    )
    agent = build_agent(args)
    assert (agent.id, agent.name) == ("carol", "Carol")
    assert agent.persona == Persona(
        system_prompt="You are terse.",
        provider=ProviderConfig(provider="scripted", script=("ok",)),
        role="pragmatist",
        awareness="basic",
    )


def test_bad_flags_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--name", "Bob", "--provider", "scripted"])
    assert exited.value.code == 2
    assert "--provider scripted needs --script-file" in capsys.readouterr().err


async def test_the_program_serves_room_turns_over_stdio(tmp_path: Path) -> None:
    script = tmp_path / "bob.txt"
    script.write_text("Hello {speaker}, I disagree.\n---\nGoodbye.\n")
    args = ["-m", "mesh.agents.persona", "--name", "Bob", "--role", "critic"]
    args += ["--provider", "scripted", "--script-file", str(script), "--stdio"]
    env = {**os.environ, "MESH_LOG_LEVEL": "warning"}
    # A child's start-up: its imports alone passed 10 s under coverage at load 12.
    with anyio.fail_after(SPAWN_TIMEOUT):
        async with open_stdio_peer(sys.executable, args, env=env) as bob:
            assert bob.remote_info["id"] == "bob"
            persona = await bob.call("room/persona")
            assert persona == {
                "id": "bob",
                "name": "Bob",
                "role": "critic",
                "awareness": "intermediate",
                "provider": "scripted",
                "model": "",
                "context_tokens": None,
            }
            params = _builtins(request(2))
            reply = await bob.call("room/turn", params)
            usage = reply.pop("usage")  # the provider's token counts (scripted: words)
            assert usage["output_tokens"] == len(reply["text"].split()) and usage["input_tokens"]
            assert reply == {
                "room_id": "r1",
                "turn": 2,
                "text": "Hello Alice, I disagree.",
                "status": "spoken",
                "reason": "",
            }
            assert (await bob.call("room/turn", params))["status"] == "replayed"
            assert (await bob.call("room/turn", _builtins(request(1))))["status"] == "dropped"


def test_help_lists_persona_and_transport_flags() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mesh.agents.persona", "--help"],
        capture_output=True,
        text=True,
        timeout=SPAWN_TIMEOUT,  # a child's start-up, as above
        check=False,
    )
    assert result.returncode == 0
    assert "--script-file" in result.stdout and "--connect" in result.stdout


def _builtins(value: object) -> object:
    import msgspec

    return msgspec.to_builtins(value)


def test_a_missing_api_key_stops_the_program_at_start_up() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MESH_TEST_UNSET_KEY"}
    flags = ["--name", "Bob", "--provider", "openai", "--model", "gpt-x"]
    flags += ["--api-key-env", "MESH_TEST_UNSET_KEY", "--stdio"]
    result = subprocess.run(
        [sys.executable, "-m", "mesh.agents.persona", *flags],
        capture_output=True,
        text=True,
        timeout=SPAWN_TIMEOUT,  # a child's start-up, as above
        check=False,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 3, result.stderr
    assert "MESH_TEST_UNSET_KEY" in result.stderr and "Traceback" not in result.stderr
