"""The agent SDK, served in-process over the memory transport (both event loops)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import msgspec
import pytest

from mesh import Agent, InvalidParams, MethodNotFound, Peer, RemoteError, RequestContext, ToolError
from mesh.protocol import MESH_CODEC, DecodeFailure
from mesh.testing import open_memory_peer

pytestmark = pytest.mark.anyio


class Point(msgspec.Struct):
    x: float
    y: float


def make_agent() -> Agent:
    agent = Agent("geo", name="Geometry", version="1.2.3", capabilities=["math"])

    @agent.tool
    async def midpoint(a: Point, b: Point) -> Point:
        """The point halfway between two points."""
        return Point((a.x + b.x) / 2, (a.y + b.y) / 2)

    @agent.tool(name="count", description="Count words.")
    def count_words(text: Annotated[str, msgspec.Meta(max_length=100)], ctx: RequestContext) -> int:
        ctx.report_progress(1, 1)
        return len(text.split())

    @agent.tool
    async def refuse() -> None:
        raise ToolError("not today", code=-32099, data={"why": "tests"})

    @agent.method("math/add")
    async def add(ctx: RequestContext, params: Any) -> Any:
        return params["a"] + params["b"]

    return agent


async def test_schemas_come_from_type_hints() -> None:
    async with open_memory_peer(make_agent()) as peer:
        tools = {t["name"]: t for t in await peer.list_tools()}
    midpoint = tools["midpoint"]
    assert midpoint["description"] == "The point halfway between two points."
    assert midpoint["inputSchema"]["required"] == ["a", "b"]
    assert midpoint["inputSchema"]["properties"]["a"] == {"$ref": "#/$defs/Point"}
    assert midpoint["inputSchema"]["$defs"]["Point"]["required"] == ["x", "y"]
    assert midpoint["outputSchema"]["required"] == ["x", "y"]
    count = tools["count"]
    assert count["description"] == "Count words."
    assert "ctx" not in count["inputSchema"]["properties"]
    assert count["inputSchema"]["properties"]["text"] == {"type": "string", "maxLength": 100}


async def test_calls_validate_and_convert_arguments() -> None:
    async with open_memory_peer(make_agent()) as peer:
        result = await peer.call_tool("midpoint", {"a": {"x": 0, "y": 0}, "b": {"x": 2, "y": 4}})
        assert result == {"x": 1.0, "y": 2.0}
        assert await peer.call_tool("count", {"text": "one two three"}) == 3
        # Paths are relative to the arguments, as the tool's author wrote them.
        with pytest.raises(InvalidParams, match=r"got `str` - at `\$\.b\.y` "):
            await peer.call_tool("midpoint", {"a": {"x": 0, "y": 0}, "b": {"x": 2, "y": "4"}})
        with pytest.raises(InvalidParams, match=r"missing required field `b` - at `\$` "):
            await peer.call_tool("midpoint", {"a": {"x": 0, "y": 0}})
        with pytest.raises(InvalidParams, match="length <= 100"):
            await peer.call_tool("count", {"text": "x" * 101})
        with pytest.raises(
            InvalidParams, match=r"invalid tools/call params.*`\$\.payload\.params`"
        ):
            await peer.call("tools/call", ["not", "an", "object"])


async def test_errors_keep_the_code_the_handler_chose() -> None:
    async with open_memory_peer(make_agent()) as peer:
        # A code the mesh does not define arrives as a plain RemoteError carrying it.
        with pytest.raises(RemoteError) as refused:
            await peer.call_tool("refuse")
        assert type(refused.value) is RemoteError
        assert refused.value.code == -32099 and refused.value.data == {"why": "tests"}
        with pytest.raises(MethodNotFound, match=r"tools: count, midpoint, refuse"):
            await peer.call_tool("nothing")


async def test_custom_methods_info_and_notifications() -> None:
    agent = make_agent()
    got = anyio.Event()
    seen: list[Any] = []

    @agent.on_notification("hello")
    async def hello(peer: Peer, params: Any) -> None:
        seen.append(params)
        got.set()

    async with open_memory_peer(agent) as peer:
        assert await peer.call("math/add", {"a": 2, "b": 3}) == 5
        info = await peer.call("agent/info")
        assert info == {
            "id": "geo",
            "name": "Geometry",
            "description": "",
            "version": "1.2.3",
            "capabilities": ["math"],
            "tools": ["midpoint", "count", "refuse"],
            "methods": [
                "agent/info",
                "completion/complete",
                "math/add",
                "ping",
                "prompts/get",
                "prompts/list",
                "resources/list",
                "resources/read",
                "resources/subscribe",
                "resources/templates/list",
                "resources/unsubscribe",
                "tools/call",
                "tools/list",
            ],
        }
        await peer.notify("hello", {"from": "test"})
        with anyio.fail_after(5):
            await got.wait()
    assert seen == [{"from": "test"}]


def test_declaration_errors_are_caught_early() -> None:
    agent = Agent("a")

    @agent.tool
    async def one() -> None: ...

    with pytest.raises(ValueError, match="already has a tool named 'one'"):
        agent.tool(one)
    with pytest.raises(TypeError, match="must be a plain keyword"):

        @agent.tool
        async def star(*args: int) -> None: ...

    with pytest.raises(ValueError, match="already handles 'ping'"):
        agent.method("ping")(one)


def test_a_parameter_without_a_type_hint_is_refused_with_the_fix() -> None:
    agent = Agent("a")
    with pytest.raises(TypeError) as refused:

        @agent.tool
        def greet(name, excited: bool = False) -> str:  # type: ignore[no-untyped-def]
            return str(name)

    message = str(refused.value)
    assert "tool 'greet': parameter 'name' has no type hint" in message
    assert "`name: str`" in message and "`name: Any`" in message
    assert "greet" not in agent.tools


def checked_agent() -> Agent:
    agent = Agent("checked")

    @agent.tool
    def count(text: str) -> int:
        return "not an int" if text == "lie" else len(text)  # type: ignore[return-value]

    @agent.tool
    async def point(broken: bool) -> Point:
        return Point(1.0, "north") if broken else Point(1.0, 2.0)  # type: ignore[arg-type]

    @agent.tool
    async def scores(poison: bool, level: float = 0.5) -> dict[str, list[float]]:
        return {"scores": [level, float("nan") if poison else 1.0]}

    @agent.tool
    def anything(value: Any) -> Any:
        return {"x": float(value)} if isinstance(value, str) else value  # "inf" -> inf

    @agent.tool
    def nothing() -> None:
        return 3  # type: ignore[return-value]

    return agent


async def test_results_are_checked_against_the_declared_return_type() -> None:
    from structlog.testing import capture_logs

    async with open_memory_peer(checked_agent()) as peer:
        assert await peer.call_tool("count", {"text": "four"}) == 4
        assert await peer.call_tool("point", {"broken": False}) == {"x": 1.0, "y": 2.0}
        with capture_logs() as logs, pytest.raises(ToolError) as wrong:
            await peer.call_tool("count", {"text": "lie"})
        assert str(wrong.value).startswith(
            "tool 'count' returned an invalid result: Expected `int`, got `str` - at `$`"
        )
        assert wrong.value.data == {"type": "InvalidResult"}
        assert [e["event"] for e in logs] == ["agent.result_invalid"]
        assert logs[0]["tool"] == "count"
        # A Struct is checked field by field, not waved through as an instance.
        with pytest.raises(ToolError, match=r"point.*Expected `float`, got `str` - at `\$\.y`"):
            await peer.call_tool("point", {"broken": True})
        with pytest.raises(ToolError, match=r"'nothing'.*Expected `null`, got `int`"):
            await peer.call_tool("nothing")
        assert await peer.call_tool("anything", {"value": [1, "two"]}) == [1, "two"]


async def test_nan_and_infinity_have_one_outcome() -> None:
    """JSON has neither: a result holding one is refused (naming the path); an argument
    cannot hold one (it is sent as null, which a float parameter refuses)."""
    async with open_memory_peer(checked_agent()) as peer:
        assert await peer.call_tool("scores", {"poison": False}) == {"scores": [0.5, 1.0]}
        with pytest.raises(ToolError, match=r"'scores'.*NaN and infinity.* at `\$\.scores\[1\]`"):
            await peer.call_tool("scores", {"poison": True})
        with pytest.raises(InvalidParams, match=r"Expected `float`, got `null` - at `\$\.level`"):
            await peer.call_tool("scores", {"poison": False, "level": float("inf")})
        # Untyped results are checked for NaN too.
        with pytest.raises(ToolError, match=r"'anything'.*NaN and infinity.* at `\$\.x`"):
            await peer.call_tool("anything", {"value": "inf"})
    # A number no float can hold is refused with the frame, before any tool sees it.
    frame = (
        b'{"type":"request","id":"6f1c1c1e-2d2b-4c4a-9b9b-1a1a1a1a1a1a","timestamp":1,'
        b'"payload":{"method":"tools/call","params":{"name":"scores","arguments":{"level":1e999}}}}'
    )
    with pytest.raises(DecodeFailure, match="Number out of range"):
        MESH_CODEC.decode(frame)


def where_handlers_run() -> tuple[Agent, list[str]]:
    """An agent whose tools and methods record the task they ran in."""
    agent = Agent("where")
    seen: list[str] = []

    def record(label: str) -> None:
        seen.append(f"{label}:{anyio.get_current_task().name}")

    @agent.tool
    def now(x: int) -> int:
        record("now")
        return x + 1

    @agent.tool
    def later(x: int) -> int | Awaitable[int]:
        record("later-start")

        async def finish() -> int:
            await anyio.lowlevel.checkpoint()
            record("later-finish")
            return x * 2

        return finish()

    @agent.tool
    def broken(x: int) -> int:
        raise ValueError(f"bad {x}")

    @agent.tool
    def async_broken() -> Awaitable[int]:
        async def finish() -> int:
            await anyio.lowlevel.checkpoint()
            raise LookupError("gone")

        return finish()

    @agent.method("sync/echo")
    def sync_echo(ctx: RequestContext, params: Any) -> Any:
        record("method")
        return params

    return agent, seen


async def test_plain_functions_answer_inline_and_awaitables_get_a_task() -> None:
    agent, seen = where_handlers_run()
    async with open_memory_peer(agent) as peer:
        assert await peer.call_tool("now", {"x": 1}) == 2
        assert await peer.call_tool("later", {"x": 4}) == 8
        assert await peer.call("sync/echo", [1, "two"]) == [1, "two"]
    tasks = {entry.split(":", 1)[0]: entry.split(":", 1)[1] for entry in seen}
    # Inline: in the connection's reader, not in a per-request handler task.
    assert tasks["now"] == tasks["later-start"] == tasks["method"] != "mesh.handler"
    assert tasks["later-finish"] == "mesh.handler"


async def test_plain_functions_fail_like_async_ones() -> None:
    agent, _ = where_handlers_run()
    async with open_memory_peer(agent) as peer:
        with pytest.raises(ToolError, match="bad 3") as raised:
            await peer.call_tool("broken", {"x": 3})
        assert raised.value.data == {"type": "ValueError"}
        with pytest.raises(ToolError, match="gone") as raised:
            await peer.call_tool("async_broken")
        assert raised.value.data == {"type": "LookupError"}
        with pytest.raises(InvalidParams, match="Expected `int`"):
            await peer.call_tool("now", {"x": "one"})
        assert await peer.call_tool("now", {"x": 41}) == 42  # the link is unharmed


async def test_answer_now_or_later_publishes_the_answer_schema() -> None:
    agent, _ = where_handlers_run()
    async with open_memory_peer(agent) as peer:
        tools = {t["name"]: t for t in await peer.list_tools()}
    assert tools["later"]["outputSchema"] == {"type": "integer"}
    assert "outputSchema" not in tools["async_broken"]


async def test_plain_notification_handlers_run_inline_and_failures_harm_nothing() -> None:
    agent, seen = where_handlers_run()
    done = anyio.Event()

    @agent.on_notification("note/now")
    def now(peer: Peer, params: Any) -> None:
        seen.append(f"note:{anyio.get_current_task().name}")
        if params == "boom":
            raise RuntimeError("handler bug")

    @agent.on_notification("note/later")
    async def later(peer: Peer, params: Any) -> None:
        seen.append(f"later:{anyio.get_current_task().name}")
        done.set()

    async with open_memory_peer(agent) as peer:
        await peer.notify("note/now", "boom")  # logged on the agent's side, never answered
        await peer.notify("note/now", "fine")
        await peer.notify("note/later", None)
        # Only a hang guard: the logged "boom" alone took over 5 s at load 14 on two cores.
        with anyio.fail_after(60):
            await done.wait()
        assert await peer.call_tool("now", {"x": 1}) == 2  # the link still serves
    tasks = [entry.split(":", 1) for entry in seen]
    assert [label for label, _ in tasks] == ["note", "note", "later", "now"]
    assert tasks[0][1] == tasks[1][1] == tasks[3][1] != "mesh.notification"
    assert tasks[2][1] == "mesh.notification"
