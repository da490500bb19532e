"""An agent's resources, templates, prompts and completion as mesh methods (in memory)."""

from __future__ import annotations

import base64

import pytest

from mesh import Agent, CompletionArgument, CompletionRef, RemoteError
from mesh.content import MAX_ITEM_BYTES, Image, PromptMessage, Text
from mesh.testing import open_memory_peer

pytestmark = pytest.mark.anyio


def make_agent() -> Agent:
    agent = Agent("notes")

    @agent.resource("note://readme", mime_type="text/markdown", description="Read me.")
    def readme() -> str:
        return "# hello"

    @agent.resource("note://logo")
    def logo() -> Image:
        return Image(data=b"\x89PNG", mime_type="image/png")

    @agent.resource("note://huge")
    def huge() -> bytes:
        return bytes(MAX_ITEM_BYTES + 1)

    @agent.resource("note://{folder}/{name}")
    def note(folder: str, name: str) -> str:
        return f"{folder}/{name}"

    @agent.prompt(description="Two turns.")
    def chat(topic: str, tone: str = "kind") -> list[PromptMessage]:
        return [
            PromptMessage(content=f"Talk about {topic}, {tone}ly."),
            PromptMessage(role="assistant", content=Text(text="Sure.")),
        ]

    @agent.completion()
    def complete(
        ref: CompletionRef, argument: CompletionArgument, context: dict[str, str]
    ) -> list[str]:
        return [f"{ref.name or ref.uri}:{argument.name}={argument.value}", *context.values()]

    return agent


async def test_resources_and_templates_are_listed_and_read() -> None:
    async with open_memory_peer(make_agent()) as peer:
        listed = await peer.call("resources/list")
        assert listed["resources"][0] == {
            "uri": "note://readme",
            "name": "readme",
            "description": "Read me.",
            "mimeType": "text/markdown",
        }
        templates = await peer.call("resources/templates/list")
        assert [t["uriTemplate"] for t in templates["resourceTemplates"]] == [
            "note://{folder}/{name}"
        ]
        logo = (await peer.call("resources/read", {"uri": "note://logo"}))["contents"][0]
        assert logo == {
            "uri": "note://logo",
            "mimeType": "image/png",
            "blob": base64.b64encode(b"\x89PNG").decode(),
        }
        read = await peer.call("resources/read", {"uri": "note://work/todo"})
        assert read["contents"][0]["text"] == "work/todo"


async def test_bad_reads_are_refused_by_name() -> None:
    async with open_memory_peer(make_agent()) as peer:
        with pytest.raises(RemoteError, match="has no resource 'note://a/b/c'") as unknown:
            await peer.call("resources/read", {"uri": "note://a/b/c"})  # a segment is one level
        assert unknown.value.code == -32002
        with pytest.raises(RemoteError, match="MAX_ITEM_BYTES"):
            await peer.call("resources/read", {"uri": "note://huge"})
        with pytest.raises(RemoteError, match="invalid resources/read params"):
            await peer.call("resources/read", {"url": "note://readme"})
        with pytest.raises(RemoteError, match="has no resource"):
            await peer.call("resources/subscribe", {"uri": "note://nothing-here"})


async def test_prompts_take_their_arguments_and_say_their_messages() -> None:
    async with open_memory_peer(make_agent()) as peer:
        listed = (await peer.call("prompts/list"))["prompts"]
        assert listed == [
            {
                "name": "chat",
                "description": "Two turns.",
                "arguments": [
                    {"name": "topic", "required": True},
                    {"name": "tone", "required": False},
                ],
            }
        ]
        got = await peer.call("prompts/get", {"name": "chat", "arguments": {"topic": "tea"}})
        assert got["messages"] == [
            {"role": "user", "content": {"type": "text", "text": "Talk about tea, kindly."}},
            {"role": "assistant", "content": {"type": "text", "text": "Sure."}},
        ]
        with pytest.raises(RemoteError, match=r"unknown \['colour'\]"):
            await peer.call(
                "prompts/get", {"name": "chat", "arguments": {"topic": "t", "colour": "x"}}
            )
        with pytest.raises(RemoteError, match=r"missing \['topic'\]"):
            await peer.call("prompts/get", {"name": "chat"})


async def test_completion_hears_the_reference_the_argument_and_the_context() -> None:
    async with open_memory_peer(make_agent()) as peer:
        asked = {
            "ref": {"type": "ref/prompt", "name": "chat"},
            "argument": {"name": "tone", "value": "fr"},
            "context": {"arguments": {"topic": "tea"}},
        }
        done = await peer.call("completion/complete", asked)
        assert done["completion"] == {
            "values": ["chat:tone=fr", "tea"],
            "total": 2,
            "hasMore": False,
        }


def test_a_template_function_takes_exactly_the_templates_parameters() -> None:
    agent = Agent("bad")
    with pytest.raises(TypeError, match=r"must be the template's \{params\} \['id'\]"):

        @agent.resource_template("item://{id}")
        def wrong(name: str) -> str:
            return name

    with pytest.raises(TypeError, match="a fixed URI's function takes no arguments"):

        @agent.resource("item://fixed")
        def takes(name: str) -> str:
            return name


def failing_agent() -> Agent:
    """An agent whose features fail in each way an author can make them fail."""
    agent = Agent("shaky")

    @agent.resource("shaky://boom")
    def boom() -> str:
        raise RuntimeError("disk on fire")

    @agent.resource("shaky://odd")
    def odd() -> object:
        return {"not": "content"}

    @agent.resource("shaky://text")
    async def text() -> list[Text]:
        return [Text(text="one"), Text(text="two")]

    @agent.prompt()
    def bad_prompt() -> object:
        return 42

    @agent.completion()
    def one(ref: CompletionRef, argument: CompletionArgument, context: dict[str, str]) -> str:
        return f"only-{argument.value}"

    return agent


async def test_a_features_failure_is_its_callers_error_naming_what_failed() -> None:
    async with open_memory_peer(failing_agent()) as peer:
        with pytest.raises(RemoteError, match="resource 'shaky://boom' failed: disk on fire"):
            await peer.call("resources/read", {"uri": "shaky://boom"})
        with pytest.raises(RemoteError, match=r"answered a dict.*\$\.contents\[0\]"):
            await peer.call("resources/read", {"uri": "shaky://odd"})
        read = await peer.call("resources/read", {"uri": "shaky://text"})
        assert [c["text"] for c in read["contents"]] == ["one", "two"]
        with pytest.raises(RemoteError, match=r"a prompt message is text.*not a int"):
            await peer.call("prompts/get", {"name": "bad_prompt"})
        done = await peer.call(
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "bad_prompt"},
                "argument": {"name": "x", "value": "v"},
            },
        )
        assert done["completion"]["values"] == ["only-v"]  # one string is one value


async def test_bad_prompt_and_completion_params_are_refused_and_the_link_lives() -> None:
    async with open_memory_peer(make_agent()) as peer:
        with pytest.raises(RemoteError, match="invalid prompts/get params") as bad:
            await peer.call("prompts/get", {"arguments": {}})
        assert bad.value.code == -32602
        with pytest.raises(RemoteError, match=r"has no prompt 'nope' \(prompts: chat\)"):
            await peer.call("prompts/get", {"name": "nope"})
        with pytest.raises(RemoteError, match=r"unknown \['mood'\]"):
            await peer.call(
                "prompts/get", {"name": "chat", "arguments": {"topic": "t", "mood": "x"}}
            )
        with pytest.raises(RemoteError, match="invalid completion/complete params"):
            await peer.call("completion/complete", {"ref": 3})
        assert (await peer.call("resources/list"))["resources"]  # still answering


def test_a_feature_is_declared_once() -> None:
    agent = Agent("twice")

    @agent.resource("x://a")
    def a() -> str:
        return "a"

    with pytest.raises(ValueError, match="already has a resource 'x://a'"):

        @agent.resource("x://a")
        def again() -> str:
            return "b"

    @agent.resource_template("x://{id}")
    def item(id: str) -> str:
        return id

    with pytest.raises(ValueError, match=r"already has a template 'x://\{id\}'"):

        @agent.resource_template("x://{id}")
        def item_again(id: str) -> str:
            return id

    @agent.prompt()
    def hello() -> str:
        return "hi"

    with pytest.raises(ValueError, match="already has a prompt 'hello'"):

        @agent.prompt(name="hello")
        def hello_again() -> str:
            return "hi"
