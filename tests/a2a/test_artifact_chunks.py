"""A tool writes an artifact piece by piece (``ctx.report_artifact``): the a2a-sdk client
streaming from a real daemon gets each piece as it is written, the first opening the
artifact and the rest appended to it, ``lastChunk`` on the last, and a blocking send gets
the task holding the whole artifact; on both bindings, asyncio and trio."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from mesh import Agent, RequestContext
from mesh._sdk.serve import serve_agent_dial_in
from tests._backends import anyio_backend  # noqa: F401  (module-scoped: shared processes)
from tests.a2a._mesh import GUARD, Held, Mesh, as_dict, sdk_client, tool_message
from tests.integration._daemon import serve_in_process

pytestmark = pytest.mark.anyio

_MANIFEST = 'id = "scribe"\n[transport]\ntype = "dial-in"\ntoken_env = "A2A_SCRIBE_TOKEN"\n'
_TOKEN = "scribe-secret-token"
_BINDINGS = pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])


@dataclass
class Gate:
    """What a ``write`` that waits waits for: the test opens it once its stream has begun,
    so every piece is written after the stream's first event (the task as it was)."""

    opened: anyio.Event = field(default_factory=anyio.Event)


def scribe(gate: Gate) -> Agent:
    agent = Agent("scribe", description="Writes a story a line at a time.")

    @agent.tool
    async def write(lines: list[str], ctx: RequestContext, wait: bool = False) -> None:
        """Write ``lines`` as the artifact ``story``, one piece each, then a table of them."""
        if wait:
            await gate.opened.wait()
        for i, line in enumerate(lines):
            ctx.report_artifact("story", line + "\n", last=i == len(lines) - 1)
        ctx.report_artifact("stats", {"lines": len(lines)}, last=True)

    return agent


@pytest.fixture(scope="module")
async def served(
    anyio_backend: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Mesh, Gate]]:
    root: Path = tmp_path_factory.mktemp("chunks")
    (root / "manifests").mkdir()
    (root / "manifests" / "scribe.toml").write_text(_MANIFEST)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("A2A_SCRIBE_TOKEN", _TOKEN)
        async with (
            serve_in_process(root / "manifests", root / "data") as daemon,
            anyio.create_task_group() as tg,
        ):
            gate = Gate()
            tg.start_soon(lambda: serve_agent_dial_in(scribe(gate), daemon.ws, token=_TOKEN))
            await daemon.wait_online("scribe", timeout=GUARD)
            yield Mesh(daemon, Held()), gate
            tg.cancel_scope.cancel()


_LINES = ["Once", "upon", "a time"]


@_BINDINGS
async def test_a_streamed_artifact_arrives_in_chunks_and_whole_in_the_task(
    served: tuple[Mesh, Gate], binding: str
) -> None:
    mesh, gate = served
    gate.opened = anyio.Event()
    events: list[dict[str, Any]] = []
    async with sdk_client(mesh, "scribe", binding=binding) as (client, _):
        with anyio.fail_after(GUARD):
            async for event in client.send_message(tool_message("write", lines=_LINES, wait=True)):
                events.append(as_dict(event))
                gate.opened.set()  # the stream has begun: now the tool writes
    updates = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    story = [u for u in updates if u["artifact"]["name"] == "story"]
    assert [u["artifact"]["parts"] for u in story] == [[{"text": f"{t}\n"}] for t in _LINES]
    assert [u.get("append", False) for u in story] == [False, True, True]
    assert [u.get("lastChunk", False) for u in story] == [False, False, True]
    assert len({u["artifact"]["artifactId"] for u in story}) == 1
    stats = [u for u in updates if u["artifact"]["name"] == "stats"]
    assert [u["artifact"]["parts"] for u in stats] == [[{"data": {"lines": 3}}]]
    assert "artifacts" not in events[0]["task"]  # every piece came after the stream began
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@_BINDINGS
async def test_a_blocking_send_gets_the_whole_artifact_and_no_empty_result(
    served: tuple[Mesh, Gate], binding: str
) -> None:
    mesh, _ = served
    async with sdk_client(mesh, "scribe", streaming=False, binding=binding) as (client, _):
        with anyio.fail_after(GUARD):
            events = [e async for e in client.send_message(tool_message("write", lines=_LINES))]
    task: dict[str, Any] = as_dict(events[-1].task)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    by_name = {a["name"]: a["parts"] for a in task["artifacts"]}
    assert by_name == {
        "story": [{"text": f"{t}\n"} for t in _LINES],
        "stats": [{"data": {"lines": 3}}],
    }
