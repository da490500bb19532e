"""Running one task: the mesh call a message became, its progress and its end as A2A events.

The call is made through the door (:meth:`~mesh._orchestrator.door.Door.call`: access,
deadlines and cancel are the door's), inside a cancel scope the
task holds, so ``CancelTask`` cancels the call and the agent hears ``cancelled``
at once. What happens becomes the task's events:

- the start: ``WORKING``;
- a tool's progress report: a ``WORKING`` status whose message holds the
  report's text and ``{"progress", "total"}``;
- a piece of an artifact a tool is writing (``ctx.report_artifact``): that
  artifact's next chunk, opened by its first piece (``append: false``), appended to
  by the rest, ``lastChunk`` on the last; the task holds it whole;
- a chat reply being written: the ``reply`` artifact, opened by the first piece
  (``append: false``: a client may only append to an artifact it has) and
  appended to by the rest;
- the result: its artifacts (``mesh.a2a._content``: ``result``, and one per
  resource a tool returned; a chat's ``reply``), then ``COMPLETED``, whose
  status holds no message: the reply is in the artifact, and a client that shows
  both would show it twice (it is in the task's history all the same);
- an error: ``FAILED`` with the mesh's message (``REJECTED`` when the tool declined
  the task, ``mesh.a2a._content``); a cancel: ``CANCELED``;
- the agent asking its caller for input (``ctx.elicit``): ``INPUT_REQUIRED`` until the
  client's next message answers, then ``WORKING`` again (``mesh.a2a._asking``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mesh._errors import MeshError
from mesh._logging import get_logger
from mesh._orchestrator.access import NOBODY, Principal
from mesh.a2a._asking import task_asks
from mesh.a2a._content import message_reply, rejected, result_artifacts
from mesh.a2a._mapping import ROOM_TURN, Conversations, Plan
from mesh.a2a._tasks import Task, new_id
from transports._loop import current_loop

if TYPE_CHECKING:
    from mesh._orchestrator.bound import Doorway

__all__ = ["agent_message", "run_task"]

log = get_logger("mesh.a2a")


def agent_message(text: str, data: Any = None, *, context_id: str, task_id: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    if data is not None:
        parts.append({"data": data})
    return {
        "messageId": new_id(),
        "role": "ROLE_AGENT",
        "parts": parts,
        "contextId": context_id,
        "taskId": task_id,
    }


async def run_task(
    mesh: Doorway,
    task: Task,
    plan: Plan,
    *,
    conversations: Conversations,
    timeout: float | None,
    on_behalf_of: Principal = NOBODY,
) -> None:
    """Make the call ``plan`` says for ``task``, for ``on_behalf_of``, and record what happens."""
    if task.finished:
        return  # cancelled before it started
    task.set_state("TASK_STATE_WORKING")
    scope = current_loop().cancel_scope()  # as anyio.CancelScope(), without its look-up
    with scope:
        task.scope = scope
        try:
            if plan.tool is None:
                await _chat(mesh, task, plan.text, conversations, timeout, on_behalf_of)
            else:
                await _tool(mesh, task, plan, timeout, on_behalf_of)
        except MeshError as exc:
            state = "TASK_STATE_REJECTED" if rejected(exc) else "TASK_STATE_FAILED"
            task.set_state(state, _say(task, str(exc), {"code": exc.code}))
        except Exception:
            # A fault of ours, or an answer we could not read: this task fails, and the
            # others (which share the server's task group) go on.
            log.exception("a2a.task_crashed", task=task.id, agent=task.agent)
            task.set_state("TASK_STATE_FAILED", _say(task, "the daemon failed this task"))
        finally:
            task.scope = None
    if scope.cancelled_caught:
        task.set_state("TASK_STATE_CANCELED", _say(task, "cancelled by the client"))


def _say(task: Task, text: str, data: Any = None) -> dict[str, Any]:
    return agent_message(text, data, context_id=task.context_id, task_id=task.id)


async def _tool(
    mesh: Doorway,
    task: Task,
    plan: Plan,
    timeout: float | None,
    on_behalf_of: Principal,
) -> None:
    pieces = _Pieces(task)

    def progress(update: Mapping[str, Any]) -> None:
        if pieces.take(update.get("artifact")):
            return
        text = update.get("message")
        numbers = {k: update[k] for k in ("progress", "total") if update.get(k) is not None}
        message = _say(task, text if isinstance(text, str) else "", numbers)
        task.set_state("TASK_STATE_WORKING", message, remember=False)

    params = {"name": plan.tool, "arguments": plan.arguments}
    result = await mesh.call(
        task.agent,
        "tools/call",
        params,
        timeout=timeout,
        on_progress=progress,
        on_behalf_of=on_behalf_of,
        **task_asks(task),
    )
    reply = message_reply(result)
    if reply is not None:
        # Answered with a Message: a blocking send returns it; a stream sees it as the
        # status message of COMPLETED (a stream began with the task before it came).
        said = dict(_say(task, ""), parts=reply)
        task.reply = said
        task.remember(said)
        task.set_state("TASK_STATE_COMPLETED", said, remember=False)
        return
    # A tool that wrote its artifacts as it went and returned nothing adds none.
    made = [] if result is None and pieces.written else result_artifacts(result)
    for name, parts in made:
        artifact = {"artifactId": new_id(), "name": name, "parts": parts}
        task.add_artifact(artifact, append=False, last=True)
    task.set_state("TASK_STATE_COMPLETED")


class _Pieces:
    """The artifacts a tool writes piece by piece, by name: each has one ``artifactId``
    from its first piece to its last."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self._open: dict[str, str] = {}
        self.written = False

    def take(self, piece: Any) -> bool:
        """Add ``piece`` (a progress report's ``artifact``) to its artifact; False when it
        is none (a plain progress report)."""
        if not isinstance(piece, Mapping) or not isinstance(piece.get("name"), str):
            return False
        name = piece["name"]
        part = {"text": piece["text"]} if isinstance(piece.get("text"), str) else None
        part = part or {"data": piece.get("data")}
        opened = name in self._open
        artifact_id = self._open.setdefault(name, new_id())
        last = piece.get("last") is True
        if last:
            del self._open[name]
        artifact = {"artifactId": artifact_id, "name": name, "parts": [part]}
        self._task.add_artifact(artifact, append=opened, last=last)
        self.written = True
        return True


async def _chat(
    mesh: Doorway,
    task: Task,
    text: str,
    conversations: Conversations,
    timeout: float | None,
    on_behalf_of: Principal,
) -> None:
    artifact_id = new_id()
    opened = False

    def piece(update: Mapping[str, Any]) -> None:
        nonlocal opened
        written = update.get("message")
        if isinstance(written, str) and written:
            artifact = {"artifactId": artifact_id, "name": "reply", "parts": [{"text": written}]}
            task.add_artifact(artifact, append=opened, last=False)
            opened = True

    params = conversations.turn(task.owner, task.agent, task.context_id, text)
    if timeout is not None:
        params["timeout"] = timeout
    # A chat is a conversation of one: its turns go through the door as a room's do,
    # for the token that made the task.
    room = on_behalf_of.in_room(f"a2a-{task.context_id}")
    result = await mesh.call(
        task.agent,
        ROOM_TURN,
        params,
        timeout=timeout,
        on_progress=piece,
        on_behalf_of=room,
        **task_asks(task),
    )
    reply = str(result.get("text", "")) if isinstance(result, dict) else str(result)
    conversations.replied(task.owner, task.agent, task.context_id, reply)
    # The whole reply replaces the pieces: what a late reader sees is exactly what was said.
    whole = {"artifactId": artifact_id, "name": "reply", "parts": [{"text": reply}]}
    task.add_artifact(whole, append=False, last=True)
    task.remember(_say(task, reply))
    task.set_state("TASK_STATE_COMPLETED")
