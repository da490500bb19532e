"""`mesh dev AGENT`: an agent file, module or manifest tried by itself, as its author would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

AGENT = '''\
from typing import Annotated

import anyio
import msgspec

from mesh import Agent, RequestContext, run_agent

agent = Agent("greeter", description="Greets people.")


@agent.tool
async def greet(name: str, excited: bool = False) -> dict[str, str]:
    """Say hello."""
    return {"greeting": f"Hello, {name}{'!' if excited else '.'}"}


@agent.tool
async def count(
    steps: Annotated[int, msgspec.Meta(ge=1, le=5, description="how many")], ctx: RequestContext
) -> int:
    """Count, reporting progress."""
    for step in range(1, steps + 1):
        ctx.report_progress(step, steps, f"step {step}")
        await anyio.sleep(0)
    return steps


@agent.tool
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


@agent.tool
async def nap(seconds: float) -> None:
    """Sleep."""
    await anyio.sleep(seconds)


@agent.tool(description="Says \\x1b]0;pwned\\x07 things")
def shout(text: str) -> str:
    return text + "\\x1b[2J"


if __name__ == "__main__":
    run_agent(agent)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "greeter.py").write_text(AGENT)
    return tmp_path


def dev(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mesh.cli", "dev", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_lists_the_tools_with_their_argument_types(project: Path) -> None:
    shown = dev(project, "greeter.py")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "greeter 0.1.0: Greets people.  [greeter.py]"
    assert "greet  Say hello." in lines
    assert "    name     str             required" in lines
    assert "    excited  bool            = False" in lines
    assert "    ->       dict[str, str]            the result" in lines
    assert "    steps  int  required  how many; >= 1, <= 5" in lines
    # What the agent wrote is shown, not obeyed.
    assert "shout  Says \\x1b]0;pwned\\x07 things" in lines
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_call_prints_its_result_with_progress_on_stderr(project: Path, backend: str) -> None:
    called = dev(project, "greeter.py", "--call", "count", "--arg", "steps=3", "--backend", backend)
    assert called.returncode == 0, called.stderr
    assert called.stdout == "3\n"
    assert called.stderr.splitlines() == [
        "progress 1/3 step 1",
        "progress 2/3 step 2",
        "progress 3/3 step 3",
    ]
    json_args = '{"name": "Ada", "excited": true}'
    called = dev(project, "greeter.py", "--call", "greet", "--json", json_args)
    assert (called.returncode, json.loads(called.stdout)) == (0, {"greeting": "Hello, Ada!"})
    shouted = dev(project, "greeter.py", "--call", "shout", "--arg", "text=hi")
    assert shouted.stdout == '"hi\\u001b[2J"\n'


def test_errors_as_the_author_needs_them(project: Path) -> None:
    raised = dev(project, "greeter.py", "--call", "divide", "--arg", "a=1", "--arg", "b=0")
    assert raised.returncode == 1
    assert "error: ToolError -32000 (raised ZeroDivisionError): float division by zero" in (
        raised.stderr
    )
    assert 'greeter.py", line' in raised.stderr and "return a / b" in raised.stderr  # the traceback

    invalid = dev(project, "greeter.py", "--call", "greet", "--arg", "name=5")
    assert invalid.returncode == 1
    assert "Expected `str`, got `int` - at `$.name`" in invalid.stderr
    assert "usage: greet name=STR [excited=BOOL]" in invalid.stderr

    unknown = dev(project, "greeter.py", "--call", "grete")
    assert unknown.returncode == 1
    assert "no tool named 'grete' (tools: count, divide, greet, nap, shout)" in unknown.stderr

    slow = dev(project, "greeter.py", "--call", "nap", "--arg", "seconds=30", "--timeout", "0.3")
    assert slow.returncode == 5 and "CallTimeout" in slow.stderr

    bad_flag = dev(project, "greeter.py", "--call", "greet", "--arg", "name")
    assert bad_flag.returncode == 2 and "KEY=VALUE" in bad_flag.stderr


def test_agents_that_cannot_be_loaded(project: Path) -> None:
    missing = dev(project, "nothere.py")
    assert (missing.returncode, missing.stderr) == (2, "mesh dev: no agent file at 'nothere.py'\n")
    (project / "plain.py").write_text("x = 1\n")
    assert "plain.py defines no mesh.Agent" in dev(project, "plain.py").stderr
    (project / "broken.py").write_text("import anyio\n\n1 / 0\n")
    broken = dev(project, "broken.py")
    assert broken.returncode == 2
    assert "importing broken.py failed" in broken.stderr and "ZeroDivisionError" in broken.stderr
    (project / "two.py").write_text("from mesh import Agent\na = Agent('a')\nb = Agent('b')\n")
    assert "several agents (a, b); pick one: two.py:NAME" in dev(project, "two.py").stderr
    assert dev(project, "two.py:b").stdout.startswith("b 0.1.0")
    assert dev(project, "no.such.module").returncode == 2


def test_a_module_and_a_manifest(project: Path) -> None:
    echo = dev(project, "mesh.agents.echo", "--call", "reverse", "--arg", "text=abc")
    assert (echo.returncode, json.loads(echo.stdout)) == (0, {"text": "cba"})

    (project / "greeter.toml").write_text(
        'id = "greeter"\n[transport]\ntype = "stdio"\ncommand = "python"\n'
        'args = ["greeter.py", "--stdio"]\ncwd = "."\n'
    )
    called = dev(project, "greeter.toml", "--call", "greet", "--arg", "name=Ada")
    assert (called.returncode, json.loads(called.stdout)) == (0, {"greeting": "Hello, Ada."})

    (project / "dial.toml").write_text(
        'id = "dial"\n[transport]\ntype = "dial-in"\ntoken_env = "DIAL_TOKEN"\n'
    )
    dial = dev(project, "dial.toml")
    assert dial.returncode == 2 and "`mesh tools dial`" in dial.stderr

    (project / "dead.toml").write_text(
        'id = "dead"\n[transport]\ntype = "stdio"\ncommand = "python"\nargs = ["-c", "pass"]\n'
    )
    dead = dev(project, "dead.toml")
    assert dead.returncode == 4 and "dead" in dead.stderr


def test_the_prompt_calls_tool_after_tool(project: Path) -> None:
    lines = "greet name=Ada excited=true\n\ngreet name\nnope\nhelp\ncount steps=2\nquit\n"
    session = dev(project, "greeter.py", "--interactive", stdin=lines)
    assert session.returncode == 0, session.stderr
    out = session.stdout
    assert '{\n  "greeting": "Hello, Ada!"\n}' in out
    assert out.count("greet  Say hello.") == 2  # the listing, then `help`
    assert out.rstrip().endswith("2")
    assert "error: arguments are KEY=VALUE, got 'name'" in session.stderr
    assert "no tool named 'nope'" in session.stderr
    # The end of input ends the session as `quit` does.
    assert dev(project, "greeter.py", "-i", stdin="greet name=Bo\n").returncode == 0


def test_on_a_terminal_it_prompts(project: Path) -> None:
    """With a TTY (here a pseudo-terminal) `mesh dev` lists the tools, then prompts."""
    import os
    import pty
    import select
    import time

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "mesh.cli", "dev", "greeter.py"],
        cwd=project,
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    sent = False
    try:
        while process.poll() is None or select.select([leader], [], [], 0)[0]:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            if not select.select([leader], [], [], 0.5)[0]:
                continue
            try:
                seen += os.read(leader, 4096)
            except OSError:  # the follower side closed: the process is gone
                break
            if not sent and b"greeter> " in seen:
                os.write(leader, b"greet name=Ada\ncount steps=2\nquit\n")
                sent = True
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        os.close(leader)
    text = seen.decode().replace("\r\n", "\n")
    assert process.returncode == 0, text
    assert "greet  Say hello." in text and "greeter> " in text
    assert '"greeting": "Hello, Ada."' in text
    # On a terminal progress redraws one line instead of adding lines.
    assert "\r\x1b[Kprogress 1/2 step 1\r\x1b[Kprogress 2/2 step 2\n2\n" in text
