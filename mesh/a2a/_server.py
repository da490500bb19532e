"""The mesh's agents as A2A agents: one handler below the JSON-RPC and HTTP+JSON bindings.

:class:`A2aServer` answers one HTTP request for one agent: its card, one JSON-RPC
call (:meth:`~A2aServer.handle`), or one HTTP+JSON request
(:meth:`~A2aServer.handle_rest`, ``mesh.a2a._rest``). Both read their request into a
method and params and call :meth:`~A2aServer.answer`, so every rule below holds in
both; only the envelope differs. The daemon puts it behind its tokens (``/a2a/{agent}``); the
caller arrives as a :class:`Caller` (who owns the tasks it makes, and what it
may call). Bad input is answered with the A2A error that names it, over HTTP
200 as JSON-RPC errors are, and the connection carries on:

========  =============================================================
 -32700   the body is not JSON
 -32600   not a JSON-RPC 2.0 request, or a body past ``max_message_size``
 -32601   a method A2A does not have (in the version asked for)
 -32602   params that do not say what they must (the text says where)
 -32001   no such task, or another client's (the same answer, on purpose)
 -32002   the task has finished, so it cannot be cancelled
 -32003   push notifications (not offered)
 -32004   a message to a task that is not waiting for input (finished, or
          working and asked nothing), or a subscription to a finished one
 -32005   a part of a media type the agent does not take (its input modes), or a
          body whose ``Content-Type`` is not JSON
 -32007   the extended card (not offered)
 -32009   an ``A2A-Version`` the mesh does not speak (1.0; 0.3 when empty)
========  =============================================================

Every error's ``data`` holds a ``google.rpc.ErrorInfo`` naming its A2A reason.
Params are read under their ProtoJSON names, so ``task_id`` is ``taskId``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import anyio
import anyio.abc

from mesh._errors import Forbidden, MeshError
from mesh._input import whole_number
from mesh._orchestrator.access import DAEMON, NOBODY, Principal, check_deadline
from mesh._orchestrator.bound import Doorway
from mesh.a2a._asking import AnswerError, answer_of
from mesh.a2a._card import MODES, Revisions, build_card, card_response, wants_legacy
from mesh.a2a._content import CONTEXT_ARGUMENT, request_context, wants_context
from mesh.a2a._jsonrpc import (
    A2aError,
    Frame,
    Streamed,
    decode_call,
    param_dict,
    param_int,
    pump,
    rpc_error,
    rpc_result,
    stream_cursor,
)
from mesh.a2a._mapping import (
    CHAT_CAPABILITY,
    TEXT_ENTRY,
    Conversations,
    Plan,
    PlanError,
    plan_call,
    unsupported_media,
)
from mesh.a2a._push import MAX_CONFIGS, CheckUrl, PushConfig, PushRefused, deliver, push_config_in
from mesh.a2a._rest import handle_rest
from mesh.a2a._runner import run_task
from mesh.a2a._tasks import StoreFull, Task, TaskStore
from mesh.a2a._wire import (
    Version,
    WireError,
    camel_keys,
    message_for,
    message_in,
    method_of,
    negotiate,
)
from mesh.a2a._wire import state_in as _state_in
from mesh.a2a._wire import task_for as _task_for
from registry import AgentId
from transports import BodyWriter, HttpRequest, HttpResponse
from transports._loop import Cancellable, Spawner, Tasks, current_loop

__all__ = ["A2aError", "A2aServer", "Caller"]

#: A JSON-RPC body larger than this is refused with -32600 (the daemon's own body
#: limit, larger, is an HTTP 413 before anything is read).
DEFAULT_MAX_MESSAGE: Final = 256 * 1024
#: Streams one client may hold open at once (each holds a connection of the daemon's).
DEFAULT_MAX_STREAMS: Final = 64
#: A card is rebuilt at most this often per agent (it asks the agent twice).
CARD_FRESH: Final = 5.0
#: How long asking an agent for its card's facts may take.
CARD_TIMEOUT: Final = 5.0
#: CancelTask waits this long for the agent's call to wind down before answering.
CANCEL_WAIT: Final = 5.0
#: A stopping server gives the tasks it cancelled this long to end (asyncio: their own).
STOP_WAIT: Final = 5.0
#: A key with an underscore (``"task_id":``), which ``camel_keys`` renames: a body where
#: none is found (values such as ``ROLE_USER`` are not followed by a colon) and nothing
#: is escaped (``\u005f``) is left as it came, with no walk through it.
_PROTO_KEY: Final = re.compile(rb'_[^"]*"\s*:')
MAX_PAGE: Final = 100
DEFAULT_PAGE: Final = 50


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is asking: ``owner`` keys the tasks it makes (nobody else sees them);
    ``identity`` is whom the mesh calls are made for, passed on as it is."""

    owner: str
    identity: Principal = NOBODY


class A2aServer:
    """Serves every agent of an orchestrator over A2A (see the module docstring)."""

    def __init__(
        self,
        mesh: Doorway,
        *,
        store: TaskStore | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE,
        max_streams: int = DEFAULT_MAX_STREAMS,
        check_push_url: CheckUrl | None = None,
    ) -> None:
        """``check_push_url(url)`` says why a webhook URL is refused (None: allowed);
        without it, push notifications are not offered. ``max_streams``: streams one
        client (owner) may hold open at once."""
        self._mesh = mesh
        self.max_streams = max_streams
        self._streams: dict[str, int] = {}
        self._check_push = check_push_url
        self.store = store if store is not None else TaskStore()
        self.max_message_size = max_message_size
        self._conversations = Conversations()
        #: What each agent's card is made of (its ``agent/info`` and its tools), and when
        #: it was asked: the card itself is made per request, for the URL it was asked at.
        self._cards: dict[str, tuple[float, dict[str, Any], list[Any]]] = {}
        self._revisions = Revisions()
        self._tasks: Tasks | None = None
        #: Starts each task's run without anyio's task handle (a large share of a served
        #: message's CPU); ``_running`` holds what cancels each, until it ends.
        self._spawner: Spawner | None = None
        self._running: dict[str, Cancellable] = {}

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the tasks clients start, until cancelled (which cancels them)."""
        loop = current_loop()
        async with anyio.create_task_group() as tg:
            await self.store.load()  # the tasks an earlier run kept, if it kept any
            await tg.start(self.store.keep)
            # The tasks' own group (trio's nursery on trio, which the spawner starts them
            # in), inside the store's: it ends first, so the journal's last write has
            # every task's end.
            async with loop.task_group() as tasks:
                self._tasks, self._spawner = tasks, Spawner(loop)
                task_status.started()
                try:
                    await anyio.sleep_forever()
                finally:
                    self._tasks = self._spawner = None
                    await self._stop_running()

    async def _stop_running(self) -> None:
        """Cancel the tasks still running, and wait (bounded) for asyncio's, which belong
        to no task group (trio's are the group's, which waits for them)."""
        running = list(self._running.values())
        for run in running:
            run.cancel()
        await Spawner.wait(running, STOP_WAIT)

    # -- the card ----------------------------------------------------------------------------

    async def card(self, request: HttpRequest, agent: str, url: str) -> HttpResponse:
        """``GET …/.well-known/agent-card.json``, with an ETag and a Last-Modified (304
        when the client's copy is current)."""
        info, tools = await self._facts(agent)
        push = self._check_push is not None
        legacy = wants_legacy(request.header("a2a-version"))
        chat = self._chat(agent)
        card = build_card(agent, info, tools, chat=chat, url=url, push=push, legacy=legacy)
        facts = {"info": info, "tools": tools, "chat": chat, "push": push}
        return card_response(card, self._revisions.since(agent, facts), request)

    async def _ask_agent(self, agent: str) -> tuple[dict[str, Any], list[Any]]:
        """What ``agent``'s card says of it: its ``agent/info`` and its tools."""
        info: Any = {}
        try:
            info = await self._mesh.call(
                agent, "agent/info", timeout=CARD_TIMEOUT, on_behalf_of=DAEMON
            )
        except MeshError:
            record = self._mesh.registry.get(AgentId(agent))
            info = {"name": record.name} if record is not None else {}
        tools = await self._tools(agent)
        return (info if isinstance(info, dict) else {}), tools

    def _forget_gone_cards(self) -> None:
        """Drop what is kept for agents the mesh no longer knows (registered, then gone)."""
        gone = [agent for agent in self._cards if not self._mesh.knows(agent)]
        for agent in gone:
            del self._cards[agent]
        self._revisions.forget(gone)

    async def _tools(self, agent: str) -> list[Any]:
        try:
            listed = await self._mesh.call(
                agent, "tools/list", timeout=CARD_TIMEOUT, on_behalf_of=DAEMON
            )
        except MeshError:
            return []
        tools = listed.get("tools") if isinstance(listed, dict) else None
        return list(tools) if isinstance(tools, list) else []

    def _chat(self, agent: str) -> bool:
        record = self._mesh.registry.get(AgentId(agent))
        return record is not None and CHAT_CAPABILITY in record.capabilities

    # -- JSON-RPC ------------------------------------------------------------------------------

    async def handle(self, request: HttpRequest, agent: str, caller: Caller) -> HttpResponse:
        """Answer one JSON-RPC request to ``agent``."""
        call: dict[str, Any] = {}
        try:
            version, method, params = self._parse(request, call)
            refused = self.stream_refused(method, caller)
            if refused is not None:
                return refused
            answer = await self.answer(
                method, params, agent, caller, version, cursor=stream_cursor(request)
            )
        except A2aError as exc:
            return rpc_error(call.get("id"), exc.code, str(exc))
        if isinstance(answer, Streamed):
            return self.stream(answer, version, caller, partial(rpc_result, call.get("id")))
        return HttpResponse(200, rpc_result(call.get("id"), answer))

    async def handle_rest(
        self, request: HttpRequest, agent: str, caller: Caller, path: Sequence[str]
    ) -> HttpResponse:
        """Answer one HTTP+JSON request to ``agent``; ``path`` is its URL's segments under
        the agent's base URL (``("message:send",)``, ``("tasks", "t1:cancel")``)."""
        return await handle_rest(self, request, agent, caller, path)

    def _parse(
        self, request: HttpRequest, call: dict[str, Any]
    ) -> tuple[Version, str, dict[str, Any]]:
        """The version, method and params of a request; ``call`` is filled with its body."""
        self.check_body(request)
        call.update(decode_call(request.body))
        version = self.version(request)
        method = method_of(call["method"], version)
        if method is None:
            raise A2aError(-32601, f"no method {call['method']!r} in A2A {version}")
        params = param_dict(call.get("params"), "params")
        if _PROTO_KEY.search(request.body) is not None or b"\\u" in request.body:
            params = camel_keys(params)
        return version, method, params

    def check_body(self, request: HttpRequest) -> None:
        """A body too large, or said to be other than JSON, is refused before it is read."""
        size = len(request.body)
        if size > self.max_message_size:
            why = f"a message of {size} bytes exceeds the limit of {self.max_message_size} bytes"
            raise A2aError(-32600, why)
        _check_content_type(request.header("content-type"))

    @staticmethod
    def version(request: HttpRequest) -> Version:
        """The dialect the request's ``A2A-Version`` header asks for (empty: 0.3)."""
        asked = request.header("a2a-version")
        version = negotiate(asked)
        if version is None:
            why = f"A2A-Version {asked!r} is not supported; this server speaks 1.0 and 0.3"
            raise A2aError(-32009, why)
        return version

    def stream_refused(self, method: str, caller: Caller) -> HttpResponse | None:
        """The 429 for a stream past the caller's ``max_streams`` (None: it may open one)."""
        if method not in ("SendStreamingMessage", "SubscribeToTask"):
            return None
        held = self._streams.get(caller.owner, 0)
        if held < self.max_streams:
            return None
        why = f"this client holds {held} open streams, the limit; close one first"
        return HttpResponse.error(429, why, limit="max_streams")

    async def answer(
        self,
        method: str,
        params: dict[str, Any],
        agent: str,
        caller: Caller,
        version: Version,
        *,
        cursor: int | None = None,
    ) -> Any:
        """What A2A ``method`` answers, whichever binding asked: its result (in
        ``version``'s shapes), or :class:`Streamed` for a stream of a task's events
        from ``cursor``. Both bindings call this, so every rule holds in both."""
        if method in ("SendMessage", "SendStreamingMessage"):
            return await self._send(method, params, agent, caller, version)
        if method == "ListTasks":
            return self._list(params, agent, caller, version)
        if "PushNotificationConfig" in method:
            return self._push_method(method, params, agent, caller, version)
        if method == "GetExtendedAgentCard":
            raise A2aError(-32007, "this agent has no extended card: its card says everything")
        task = self._find(params, agent, caller)
        if method == "GetTask":
            history = param_int(params, "historyLength", 0, 1000)
            return _task_for(task.snapshot(history_length=history), version)
        if method == "CancelTask":
            return _task_for(await self._cancel(task), version)
        # SubscribeToTask: from the client's last event (Last-Event-ID), else from now.
        if task.finished:
            raise A2aError(
                -32004,
                f"task {task.id!r} is {task.state}: a finished task has no events to come"
                " (GetTask returns it as it ended)",
            )
        return Streamed(task, cursor, to_the_end=True)

    async def _send(
        self, method: str, params: dict[str, Any], agent: str, caller: Caller, version: Version
    ) -> Any:
        task, wait = await self._start(params, agent, caller)
        if method == "SendStreamingMessage":
            return Streamed(task, None)
        if wait:
            await task.wait_resting()
        history = param_int(
            param_dict(params.get("configuration"), "configuration"), "historyLength", 0, 1000
        )
        if task.reply is not None:  # the agent answered with a Message, not a task
            return {"message": task.reply} if version == "1.0" else message_for(task.reply, version)
        result = {"task": task.snapshot(history_length=history)}
        return result if version == "1.0" else _task_for(result["task"], version)

    def _find(self, params: dict[str, Any], agent: str, caller: Caller) -> Task:
        task_id = params.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise A2aError(-32602, "`params.id` must be a task's id")
        task = self.store.get(task_id, caller.owner, agent)
        if task is None:
            raise A2aError(-32001, f"no task {task_id!r}")
        return task

    async def _start(self, params: dict[str, Any], agent: str, caller: Caller) -> tuple[Task, bool]:
        try:
            message = message_in(params.get("message"))
        except WireError as exc:
            raise A2aError(-32602, f"invalid message: {exc}") from None
        refused = unsupported_media(message["parts"], MODES)
        if refused is not None:
            raise A2aError(
                -32005,
                f"a part of media type {refused!r} is not taken here: this agent's input"
                f" modes are {', '.join(MODES)}",
            )
        config = param_dict(params.get("configuration"), "configuration")
        metadata = param_dict(params.get("metadata"), "metadata")
        timeout = self._timeout(metadata)
        try:  # the door's bound on deadlines (max_call_timeout), before a task exists
            limit = self._mesh.deadline_limit(agent)
            check_deadline(caller.identity, timeout, limit, agent=agent, method="tools/call")
        except Forbidden as exc:
            raise A2aError(-32602, f"`metadata.timeout`: {exc.message}") from None
        # blocking (1.0: unless returnImmediately; 0.3: unless blocking is false)
        wait = (
            not config.get("returnImmediately", False) and config.get("blocking", True) is not False
        )
        # A webhook is checked before the task exists: a refused one leaves nothing behind.
        push = config.get("taskPushNotificationConfig") or config.get("pushNotificationConfig")
        webhook = None if push is None else self._push_config(push, "")
        if message.get("taskId"):
            # The call's deadline was set by the message that started it: a follow-up's
            # metadata.timeout is checked above, and not applied.
            task, answer = self._follow_up(message, metadata, agent, caller)
            if webhook is not None:
                config_for = dataclasses.replace(webhook, task_id=task.id)
                self._add_push(task, config_for, cursor=task.last_event)
            _answer(task, message, answer)
            return task, wait
        info, tools = await self._facts(agent)
        plan = self._plan(agent, message, info, tools)
        tasks, spawner = self._tasks, self._spawner
        if tasks is None or spawner is None:
            raise A2aError(-32603, "the A2A server is not running")
        try:
            task = self.store.create(agent, caller.owner, message.get("contextId"))
        except StoreFull as exc:
            raise A2aError(-32603, str(exc)) from None
        message.update(contextId=task.context_id, taskId=task.id)
        task.remember(message)
        plan = _with_context(plan, tools, message, metadata)
        if webhook is not None:
            self._add_push(task, dataclasses.replace(webhook, task_id=task.id), cursor=0)
        self._running[task.id] = spawner.start(
            tasks, self._run, task, plan, timeout, caller.identity
        )
        return task, wait

    def _follow_up(
        self, message: dict[str, Any], metadata: dict[str, Any], agent: str, caller: Caller
    ) -> tuple[Task, dict[str, Any]]:
        """A message to an existing task: the task, and the answer the message gives to
        the question it waits on (mesh.a2a._asking); anything else is refused."""
        task = self.store.get(message["taskId"], caller.owner, agent)
        if task is None:
            raise A2aError(-32001, f"no task {message['taskId']!r}")
        context = message.get("contextId")
        if context and context != task.context_id:
            raise A2aError(
                -32602,
                f"`message.contextId` {context!r} is not the context of task {task.id!r}"
                f" ({task.context_id!r}): a message to a task is in the task's context",
            )
        question = task.question
        if task.finished or question is None:
            why = "has finished" if task.finished else "asked nothing"
            raise A2aError(
                -32004,
                f"task {task.id!r} is {task.state} and {why}: a message with a taskId"
                " answers a task waiting for input (TASK_STATE_INPUT_REQUIRED); send a new"
                " message without taskId (the same contextId continues the conversation)",
            )
        try:
            answer = answer_of(message, metadata, question.schema)
        except AnswerError as exc:
            why = f"not an answer to the question of task {task.id!r}: {exc}"
            raise A2aError(-32602, why) from None
        return task, answer

    async def _run(
        self, task: Task, plan: Any, timeout: float | None, on_behalf_of: Principal
    ) -> None:
        try:
            await run_task(
                self._mesh,
                task,
                plan,
                conversations=self._conversations,
                timeout=timeout,
                on_behalf_of=on_behalf_of,
            )
        finally:
            self._running.pop(task.id, None)

    def _timeout(self, metadata: dict[str, Any]) -> float | None:
        value = metadata.get("timeout")
        if value is None:
            return None
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not 0 < value < math.inf:
            raise A2aError(-32602, "`metadata.timeout` must be seconds, a number > 0")
        return float(value)

    def _plan(
        self, agent: str, message: dict[str, Any], info: dict[str, Any], tools: list[Any]
    ) -> Plan:
        try:
            return plan_call(agent, message, tools, self._chat(agent), self._entry(agent, info))
        except PlanError as exc:
            raise A2aError(-32602, str(exc)) from None

    async def _facts(self, agent: str) -> tuple[dict[str, Any], list[Any]]:
        """What the card is made of, as kept for it (asked again when stale): each message
        needs the tools' schemas, and asking for them each time would double every call."""
        now = anyio.current_time()
        kept = self._cards.get(agent)
        if kept is None or now - kept[0] >= CARD_FRESH:
            info, tools = await self._ask_agent(agent)
            kept = self._cards[agent] = (now, info, tools)
            self._forget_gone_cards()
        return kept[1], kept[2]

    def _entry(self, agent: str, info: dict[str, Any]) -> str | None:
        """The tool plain text goes to: the manifest's ``[metadata]`` says, else the agent."""
        record = self._mesh.registry.get(AgentId(agent))
        named = record.metadata.get(TEXT_ENTRY) if record is not None else None
        named = named or info.get(TEXT_ENTRY)
        return named if isinstance(named, str) and named else None

    async def _cancel(self, task: Task) -> dict[str, Any]:
        if task.finished:
            raise A2aError(-32002, f"task {task.id!r} is {task.state} and cannot be cancelled")
        if task.question is not None:  # the agent hears its question cancelled, then the call
            task.question.give({"action": "cancel"})
            task.question = None
        if task.scope is None:
            task.set_state("TASK_STATE_CANCELED")  # not started yet: it never will
        else:
            task.scope.cancel()
            with anyio.move_on_after(CANCEL_WAIT):
                while not task.finished:
                    await task.changed.wait()
        return task.snapshot()

    def _list(
        self, params: dict[str, Any], agent: str, caller: Caller, version: Version
    ) -> dict[str, Any]:
        size = param_int(params, "pageSize", 1, MAX_PAGE) or DEFAULT_PAGE
        history = param_int(params, "historyLength", 0, 1000)
        artifacts = params.get("includeArtifacts") is True
        tasks = self.store.listing(caller.owner, agent)
        if isinstance(params.get("contextId"), str) and params["contextId"]:
            tasks = [t for t in tasks if t.context_id == params["contextId"]]
        if params.get("status") not in (None, "", "TASK_STATE_UNSPECIFIED"):
            state = _state_in(params["status"])
            if state is None:
                raise A2aError(-32602, f"`params.status` {params['status']!r} is not a task state")
            tasks = [t for t in tasks if t.state == state]
        total = len(tasks)
        token = params.get("pageToken") or ""
        if token:
            before = whole_number(token) if isinstance(token, str) else None
            if before is None:
                raise A2aError(-32602, "`params.pageToken` must be a token a ListTasks answer gave")
            tasks = [t for t in tasks if t.number < before]
        page, rest = tasks[:size], tasks[size:]
        return {
            "tasks": [
                _task_for(t.snapshot(history_length=history, artifacts=artifacts), version)
                for t in page
            ],
            "nextPageToken": str(page[-1].number) if rest else "",
            "pageSize": size,
            "totalSize": total,
        }

    # -- push notifications --------------------------------------------------------------------

    def _push_config(self, value: Any, task_id: str) -> PushConfig:
        if self._check_push is None:
            raise A2aError(-32003, "push notifications are not offered by this agent")
        try:
            return push_config_in(value, task_id, self._check_push)
        except PushRefused as exc:
            raise A2aError(-32602, str(exc)) from None

    def _add_push(self, task: Task, config: PushConfig, *, cursor: int) -> PushConfig:
        if config.id not in task.push and len(task.push) >= MAX_CONFIGS:
            raise A2aError(-32602, f"a task holds at most {MAX_CONFIGS} push configs")
        task.push[config.id] = config
        tasks = self._tasks
        if tasks is not None:

            def wanted() -> bool:
                return task.push.get(config.id) is config

            tasks.start_soon(partial(deliver, task, config, cursor, still_wanted=wanted))
        return config

    def _push_method(
        self, method: str, params: dict[str, Any], agent: str, caller: Caller, version: Version
    ) -> Any:
        if self._check_push is None:
            raise A2aError(-32003, "push notifications are not offered by this agent")
        task = self._find({"id": params.get("taskId") or params.get("id")}, agent, caller)
        if method == "CreateTaskPushNotificationConfig":
            made = self._push_config(params, task.id)
            return _shown(self._add_push(task, made, cursor=task.last_event), version)
        if method == "ListTaskPushNotificationConfigs":
            configs = [_shown(c, version) for c in task.push.values()]
            return configs if version == "0.3" else {"configs": configs}
        wanted = params.get("id") if "taskId" in params else params.get("pushNotificationConfigId")
        config = task.push.get(str(wanted)) if wanted else next(iter(task.push.values()), None)
        if method == "GetTaskPushNotificationConfig":
            if config is None:
                raise A2aError(-32001, f"task {task.id!r} has no push config {wanted!r}")
            return _shown(config, version)
        # DeleteTaskPushNotificationConfig: its loop stops. Deleting what is gone already
        # succeeds: the client's wish (no such config) holds either way.
        if config is not None:
            del task.push[config.id]
        return None if version == "0.3" else {}

    # -- streams ---------------------------------------------------------------------------------

    def stream(
        self, streamed: Streamed, version: Version, caller: Caller, frame: Frame
    ) -> HttpResponse:
        """Server-sent events of ``streamed``, each event's object made a body by ``frame``
        (the binding's envelope: a JSON-RPC result, or the object itself)."""
        owner = caller.owner

        async def produce(write: BodyWriter) -> None:
            # Counted while it runs (a stream whose head never went out never starts).
            self._streams[owner] = self._streams.get(owner, 0) + 1
            try:
                await pump(streamed, version, frame, write)
            finally:
                self._streams[owner] -= 1
                if not self._streams[owner]:
                    del self._streams[owner]

        return HttpResponse(200, content_type="text/event-stream", stream=produce)


def _with_context(
    plan: Plan, tools: list[Any], message: dict[str, Any], metadata: dict[str, Any]
) -> Plan:
    """The plan, its tool given the request's context if it declares ``a2a``
    (mesh.a2a._content): filled here, never taken from the client."""
    if plan.tool is None or not wants_context(tools, plan.tool):
        return plan
    context = request_context(message, metadata)
    return dataclasses.replace(plan, arguments={**plan.arguments, CONTEXT_ARGUMENT: context})


def _answer(task: Task, message: dict[str, Any], answer: dict[str, Any]) -> None:
    """Give the task's question its answer: the message joins the history, and the task
    works again (its call goes on from the agent's ``elicit``)."""
    question = task.question
    assert question is not None
    message.update(contextId=task.context_id, taskId=task.id)
    task.remember(message)
    task.question = None
    question.give(answer)
    task.set_state("TASK_STATE_WORKING")


def _check_content_type(header: str | None) -> None:
    """A body said to be something other than JSON is refused before it is read as JSON
    (no header at all is taken as JSON, as JSON-RPC clients often send none)."""
    media = (header or "").split(";", 1)[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        why = f"a JSON-RPC body is application/json, not {media!r} (the Content-Type header)"
        raise A2aError(-32005, why)


def _shown(config: PushConfig, version: Version) -> dict[str, Any]:
    shown = config.shown()
    if version == "1.0":
        return shown
    inner = {k: v for k, v in shown.items() if k != "taskId"}
    if "authentication" in inner:
        inner["authentication"] = {"schemes": [inner["authentication"]["scheme"]]}
    return {"taskId": config.task_id, "pushNotificationConfig": inner}
