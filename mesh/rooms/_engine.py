"""The engine that drives one room: turn after turn until a rule, a person or a fault stops it.

Each turn :class:`RoomRunner` asks the turn policy who speaks, builds that
member's perspective, and awaits ``speak(agent_id, request)`` under the turn's
deadline; in production that is a ``room/turn`` call through the orchestrator,
in tests a plain function. A good reply becomes a ``MESSAGE`` (with its
convergence score), is recorded by the :class:`Journal`, and the exit rules are
asked whether that was the end.

**Idempotent turns.** A request carries ``room_id`` and ``turn``; a reply for
any other room or turn is dropped (recorded as an ``ERROR`` and the turn asked
again), and the store keeps one message per turn, so a turn that is retried,
duplicated or replayed after a crash is recorded exactly once.

**Failures.** A failed attempt (timeout, error, dropped or empty reply) is an
``ERROR`` event and is retried after ``retry_delay`` seconds, doubling; after
``max_failures`` in a row the room stops with ``ERROR`` (at once for an error that
would only repeat: method not found, invalid params, refused). If the speaker turns out
to be offline, it is not counted: the room waits for it instead (``AGENT_LEFT``,
then ``AGENT_JOINED`` or, after ``agent_grace``, ``AGENT_LOST``).

**People.** A member of kind ``human`` is not called: their turn waits on the
room's :class:`~mesh.rooms._people.Desk` for their message, up to the room's
``people.turn_timeout``, then skips them (``AGENT_LEFT``) or pauses the room, as
``people.at_timeout`` says. People who are away are passed over; a room whose
only possible partners are away waits for them. Interjections queued on the
desk are recorded between turns.

**Questions.** While ``speak`` runs, the member may ask the room's people
something (its elicitation reaches :func:`question_sink`'s handler): the room
records a ``QUESTION``, waits for a person present to answer it (through the
desk), records the ``ANSWER`` and gives it to the member. The turn's deadline
holds: a question still open when the turn ends is withdrawn (an ``ANSWER`` with
action ``withdrawn``, saying why). See :mod:`mesh.rooms._questions`.

**Streaming.** While ``speak`` runs, :func:`report_delta` (or the sink that
:func:`delta_sink` returns, for callbacks on other tasks) sends each piece of the
reply to observers as a ``DELTA``; only the final text is recorded.

**Control.** :meth:`RoomRunner.request_stop` cancels whatever the runner is
waiting for (a reply, a member, a retry delay) and records ``STOPPED`` with the
reason given (``PAUSED`` or ``STOPPED``); a reply that arrives later is simply
never asked for again. Cancelling the runner from outside (the daemon shutting
down) records nothing, so the room is still *running* in the store and is
resumed at the next start.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any, Final

import anyio
import anyio.abc
import msgspec

from mesh._errors import MeshError
from mesh._logging import get_logger
from mesh._orchestrator.access import NOBODY, Principal
from mesh.protocol import now_ms
from mesh.rooms._draws import unlabelled, weight
from mesh.rooms._events import (
    SYSTEM,
    AgentJoinedEvent,
    AgentLeftEvent,
    AnswerEvent,
    DeltaEvent,
    ErrorEvent,
    LiveEvent,
    MessageEvent,
    PointEvent,
    QuestionEvent,
    RoomEvent,
    StoppedEvent,
)
from mesh.rooms._model import Member, Room, Step, StopReason, TurnReply, TurnRequest
from mesh.rooms._observe import clock, count_stop, count_turn, count_usage, turn_span
from mesh.rooms._people import Desk, Passed
from mesh.rooms._perspective import build_turn_request, faults_of
from mesh.rooms._policy import TurnPlan, next_turn
from mesh.rooms._questions import Answer, OpenQuestion
from mesh.rooms._rules import (
    NextPoint,
    Verdict,
    before_turn,
    check_agent_lost,
    check_failures,
    convergence_score,
    judge,
    lost_deadline,
)
from mesh.rooms._state import RoomState

__all__ = [
    "MAX_RETRY_DELAY",
    "Clock",
    "Journal",
    "Presence",
    "RoomRunner",
    "Speak",
    "acting_for",
    "delta_sink",
    "question_sink",
    "report_delta",
]

log = get_logger("mesh.rooms")

#: The retry delay doubles per failure up to this: a provider that is down for a
#: while is retried twice a minute, the reconnect loop's cap.
MAX_RETRY_DELAY: Final = 30.0

Speak = Callable[[str, TurnRequest], Awaitable[TurnReply]]
"""``speak(agent_id, request)``: ask a member to take its turn."""
Presence = Callable[[str], bool]
"""``presence(agent_id)``: is the member online right now?"""
Clock = Callable[[], int]
"""Epoch milliseconds, for event timestamps."""

AskPeople = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
"""An elicitation's params in, the room's people's ``ElicitResult`` out."""

Record = Callable[[RoomEvent], Awaitable[None]]
Publish = Callable[[RoomEvent], None]
PublishLive = Callable[[LiveEvent], None]

_DELTAS: ContextVar[Callable[[str], None] | None] = ContextVar("mesh_room_deltas", default=None)
_ASKS: ContextVar[AskPeople | None] = ContextVar("mesh_room_asks", default=None)
_ACTING_FOR: ContextVar[Principal] = ContextVar("mesh_room_acting_for", default=NOBODY)


def acting_for() -> Principal:
    """Inside ``speak`` (or a member's description): who the room's call is made for.

    The room's creator, acting through the room; a speaker passes it to the
    orchestrator as ``on_behalf_of``, whose door checks it.
    """
    return _ACTING_FOR.get()


@contextmanager
def acting(principal: Principal) -> Iterator[None]:
    """Calls made inside the block are made for ``principal`` (see :func:`acting_for`)."""
    token = _ACTING_FOR.set(principal)
    try:
        yield
    finally:
        _ACTING_FOR.reset(token)


def delta_sink() -> Callable[[str], None] | None:
    """Inside ``speak``: where pieces of the reply go (keep it for callbacks on other tasks)."""
    return _DELTAS.get()


def question_sink() -> AskPeople | None:
    """Inside ``speak``: the handler that puts the member's elicitation to the room's
    people (pass it as the call's ``on_elicit``); None outside a room's turn."""
    return _ASKS.get()


def report_delta(text: str) -> None:
    """Inside ``speak``: show observers ``text``, the next piece of the reply being written."""
    sink = _DELTAS.get()
    if sink is not None and text:
        sink(text)


class Journal:
    """Numbers, stamps, records, applies and publishes a room's events, one at a time.

    Recording is shielded from cancellation: an event is either not begun or is
    durable, applied to the state and published, never half of that.
    """

    def __init__(
        self,
        state: RoomState,
        record: Record,
        publish: Publish,
        *,
        clock: Clock = now_ms,
        publish_live: PublishLive | None = None,
    ) -> None:
        self.state = state
        self._record = record
        self._publish = publish
        self._publish_live = publish_live
        self._clock = clock
        self._lock = anyio.Lock()

    def now(self) -> int:
        """The journal's clock: epoch milliseconds, as events are stamped."""
        return self._clock()

    def broadcast(self, event: LiveEvent) -> None:
        """Show ``event`` to observers now, unrecorded (a ``DELTA``), after the last ``seq``."""
        if self._publish_live is not None:
            self._publish_live(
                msgspec.structs.replace(event, seq=self.state.last_seq, timestamp=self._clock())
            )

    async def emit(
        self, event: RoomEvent, *, when: Callable[[], bool] | None = None
    ) -> RoomEvent | None:
        """Record ``event`` next; ``when``, asked once it is this event's turn, may skip it."""
        async with self._lock:
            if when is not None and not when():
                return None
            stamped = msgspec.structs.replace(
                event, seq=self.state.last_seq + 1, timestamp=self._clock()
            )
            with anyio.CancelScope(shield=True):
                await self._record(stamped)
            self.state.apply(stamped)
            self._publish(stamped)
            return stamped


class RoomRunner:
    """Takes a running room's turns until it stops; one runner per room at a time."""

    def __init__(
        self,
        journal: Journal,
        speak: Speak,
        *,
        presence: Presence | None = None,
        people: Desk | None = None,
        person_wait: float | None = None,
    ) -> None:
        self._journal = journal
        #: The longest the room waits for a person: an answer to their turn, or anyone
        #: to come back when only people could speak (None: the room's own turn_timeout,
        #: and for ever). Past it the room stops, resumably, naming them.
        self._person_wait = person_wait
        self._idle_since: float | None = None  # since when only absent people could speak
        self._state = journal.state
        self._speak = speak
        self._presence = presence
        self._desk = people or Desk()
        self._away: dict[str, float] = {}  # member id -> when it left (anyio clock)
        self._changed = anyio.Event()
        self._noticed: dict[str, tuple[bool, str]] = {}  # presence changes not yet recorded
        self._notice = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._requested: Verdict | None = None
        self._finishing = False
        self.done = anyio.Event()
        self.verdict: Verdict | None = None
        #: Whose turn is in flight (and which): an observer arriving now is told.
        self.turn_open: tuple[Member, int] | None = None
        self._written = ""  # the reply in flight so far, for an observer arriving mid-reply
        self._opened_at = 0  # when the turn in flight opened (epoch ms)
        self._draw = (0, "")  # the draw of the turn in flight, and why it was asked again
        self._deadline: int | None = None  # when a person's turn in flight times out
        self._passed: frozenset[str] = frozenset()  # a person who passed: not asked next

    @property
    def _room(self) -> Room:
        # Read afresh each time: a person joining grows the room's members.
        return self._state.room

    # -- control -------------------------------------------------------------------------

    def request_stop(self, reason: StopReason, detail: str = "") -> None:
        """Stop at once with ``reason`` (``PAUSED`` or ``STOPPED``); see :attr:`done`."""
        if self._requested is None:
            self._requested = Verdict(reason, detail or f"{reason.name.lower()} on request")
        if self._scope is not None:
            self._scope.cancel()

    def notice_presence(self, agent_id: str, online: bool, reason: str = "offline") -> None:
        """A member went offline or came back (told from any task): the room's own task
        records it, so a failure to record (a lost lease) stops this room, never the teller."""
        self._noticed[agent_id] = (online, reason)
        self._notice.set()

    async def _record_noticed(self) -> None:
        while True:
            await self._notice.wait()
            self._notice = anyio.Event()
            noticed, self._noticed = self._noticed, {}
            for agent_id, (online, reason) in noticed.items():
                await self._set_presence(agent_id, online, reason)

    async def _set_presence(self, agent_id: str, online: bool, reason: str = "offline") -> None:
        """A member went offline or came back: record it and wake the turn loop."""
        agents = {m.id for m in self._room.members if not m.human}
        if agent_id not in agents or self._finishing:
            return
        if online == (agent_id not in self._away):
            return
        member = self._room.member(agent_id)
        event: AgentJoinedEvent | AgentLeftEvent
        if online:
            del self._away[agent_id]
            event = AgentJoinedEvent(
                room_id=self._room.id, agent_id=member.id, name=member.name, role=member.role
            )
        else:
            self._away[agent_id] = anyio.current_time()
            event = AgentLeftEvent(
                room_id=self._room.id,
                agent_id=member.id,
                name=member.name,
                role=member.role,
                reason=reason,
            )
        self._changed.set()
        # Asked under the journal's lock: nothing is recorded after the room's STOPPED.
        await self._journal.emit(event, when=lambda: not self._finishing)

    # -- the loop -----------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Take turns until the room stops, then record why."""
        try:
            verdict: Verdict | None = None
            with anyio.CancelScope() as scope:
                self._scope = scope
                task_status.started()
                if self._requested is not None:
                    scope.cancel()
                verdict = await self._drive_and_record_presence()
            if verdict is None:
                assert self._requested is not None  # only a request cancels our own scope
                verdict = self._requested
            self.verdict = verdict
            count_stop(verdict.reason)
            self._finishing = True
            log.info("room.stopped", room=self._room.id, reason=str(verdict.reason))
            await self._journal.emit(
                StoppedEvent(
                    room_id=self._room.id,
                    reason=verdict.reason,
                    turn=self._state.current_turn,
                    detail=verdict.detail,
                )
            )
        finally:
            self._finishing = True
            self.done.set()

    async def _drive_and_record_presence(self) -> Verdict:
        """:meth:`_drive`, with presence changes recorded beside it on this room's task."""
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._record_noticed)
                verdict = await self._drive()
                tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise _sole(group) from None  # the room's error, as if raised by _drive alone
        return verdict

    async def _drive(self) -> Verdict:
        if self._presence is not None:
            for member in self._room.members:
                if not member.human and not self._presence(member.id):
                    grace = self._room.rules.agent_grace
                    why = f"not connected; the room waits up to {grace:g} s for it"
                    await self._set_presence(member.id, False, why)
        if self._room.agenda and self._state.point is None:
            await self._move_to(0, "")
        failures = 0
        while True:
            await self._record_interjections()
            transcript = self._state.transcript
            verdict = before_turn(self._room, transcript) or await self._wait_for_members()
            if verdict is not None:
                return verdict
            plan = self._plan(transcript)
            if plan is None:  # only people could answer, and none is here
                verdict = await self._wait_for_people()
                if verdict is not None:
                    return verdict
                continue
            self._idle_since = None
            if plan.speaker.human:
                verdict = await self._human_turn(plan)
                if verdict is not None:
                    return verdict
                continue
            # With an agenda, the turn sees the current point's messages: a new point starts
            # afresh, and a small model does not copy what it said on the last one.
            state = self._state
            request = build_turn_request(self._room, state.on_point, plan, point=state.point_text)
            started = clock()
            text, error, code = await self._attempt(request)
            if text is not None and self._room.limits.redraws:
                text = await self._redrawn(plan, state.on_point, state.point_text, text)
            count_turn(started, text is not None)
            if text is None:
                if await self._went_away(plan.speaker.id):
                    continue  # not the turn's fault: wait for the member instead
                failures += 1
                await self._failed(request, error, code, failures)
                verdict = check_failures(self._room, failures, plan.turn, error, code)
                if verdict is not None:
                    return verdict
                await anyio.sleep(
                    min(MAX_RETRY_DELAY, self._room.limits.retry_delay * 2 ** (failures - 1))
                )
                continue
            failures = 0
            await self._journal.emit(self._message(request, plan.speaker.id, text))
            verdict = await self._judge()
            if verdict is not None:
                return verdict

    async def _judge(self) -> Verdict | None:
        """The rule the last message fires; with an agenda, moving on to the next point."""
        state = self._state
        outcome = judge(self._room, state.transcript, state.point, state.point_since)
        if isinstance(outcome, NextPoint):
            await self._move_to(outcome.index, outcome.detail)
            return None
        return outcome

    async def _move_to(self, index: int, detail: str) -> None:
        await self._journal.emit(
            PointEvent(
                room_id=self._room.id,
                index=index,
                point=self._room.agenda[index],
                turn=self._state.current_turn,
                detail=detail,
            )
        )

    async def _redrawn(
        self,
        plan: TurnPlan,
        transcript: Sequence[MessageEvent],
        point: str | None,
        text: str,
    ) -> str:
        """``text``, or a later draw of its turn if it has faults (``Limits.redraws``).

        Each draw goes to the speaker as the same turn with the next ``draw`` (and
        seed); the first without a fault is kept, else the one whose faults weigh least
        (a reply that is not one, a copy or the prompt read back, weighs more). A draw
        that fails keeps the best so far: the turn itself was answered. A draw that opens
        with a member's name as a label ("Ben: …") has it taken off first.
        """
        room = self._room
        names = [member.name for member in room.members]
        text = unlabelled(text, names)
        faults = faults_of(room, transcript, plan, text, point=point)
        best = (weight(faults), text)
        for draw in range(1, room.limits.redraws + 1):
            if not faults:
                break
            why = "; ".join(faults)
            log.info("room.redraw", room=room.id, turn=plan.turn, draw=draw, faults=why)
            request = build_turn_request(room, transcript, plan, point=point, draw=draw)
            again, _, _ = await self._attempt(request, redraw=why)
            if again is None:
                break
            again = unlabelled(again, names)
            faults = faults_of(room, transcript, plan, again, point=point)
            best = min(best, (weight(faults), again), key=lambda drawn: drawn[0])
        return best[1]

    async def _attempt(
        self, request: TurnRequest, *, redraw: str = ""
    ) -> tuple[str | None, str, int | None]:
        """``(text, "", None)`` for a good reply, else ``(None, why, error code)``.

        ``redraw``: why the turn is asked again (its opening ``DELTA`` says so).
        """
        speaker = self._room.member(request.agent_id)
        self.turn_open, self._deadline = (speaker, request.turn), None
        self._draw = (request.draw, redraw)
        self._delta(speaker, request.turn, "")  # the turn has begun
        token = _DELTAS.set(partial(self._delta, speaker, request.turn))
        deadline = self._journal.now() + round(request.timeout * 1000)
        asks = _ASKS.set(partial(self._ask_people, speaker, request.turn, deadline))
        try:
            with (
                anyio.fail_after(request.timeout),
                acting(self._room.principal()),
                turn_span(self._room.id, speaker, request.turn),
            ):
                reply = await self._speak(request.agent_id, request)
        except MeshError as exc:
            return None, f"{type(exc).__name__}: {exc}{self._unanswered()}", exc.code
        except TimeoutError:
            return None, f"no reply within {request.timeout:g} s{self._unanswered()}", None
        except Exception as exc:  # a broken speak() must not take the room down
            log.warning("room.speak_failed", room=self._room.id, error=repr(exc))
            return None, f"{type(exc).__name__}: {exc}", None
        finally:
            _DELTAS.reset(token)
            _ASKS.reset(asks)
            self.turn_open = None
            await self._withdraw(request.turn)
        if reply.room_id != request.room_id or reply.turn != request.turn:
            log.info(
                "room.stale_reply_dropped", room=self._room.id, turn=request.turn, got=reply.turn
            )
            return (
                None,
                (
                    f"dropped a reply for turn {reply.turn} of room {reply.room_id!r}: "
                    f"expected turn {request.turn} of {request.room_id!r}"
                ),
                None,
            )
        if reply.status == "dropped":
            return None, f"the agent dropped the turn: {reply.reason or 'no reason given'}", None
        if not reply.text.strip():
            return None, "the agent replied with no text", None
        count_usage(request.agent_id, reply.usage)
        return reply.text, "", None

    # -- questions to the room's people ----------------------------------------------------

    async def _ask_people(
        self, speaker: Member, turn: int, deadline: int, params: dict[str, Any]
    ) -> dict[str, Any]:
        """``speaker``'s elicitation at ``turn``, put to the people present: the
        ``QUESTION`` recorded, a person's answer awaited, the ``ANSWER`` recorded."""
        questions, present = self._desk.questions, bool(self._desk.present)
        ended = questions.open
        if ended is not None and ended.answer is not None:
            await self._settle(ended)  # its asker gave up on it: recorded before the next
        question, message = questions.ask(self._room.id, turn, speaker.id, params, present)
        log.info("room.question", room=self._room.id, turn=turn, question=question.id)
        try:
            await self._journal.emit(
                QuestionEvent(
                    room_id=self._room.id,
                    agent_id=speaker.id,
                    name=speaker.name,
                    role=speaker.role,
                    turn=turn,
                    question=question.id,
                    message=message,
                    schema=dict(question.schema),
                    deadline=deadline,
                )
            )
            await question.answered.wait()
        except anyio.get_cancelled_exc_class():
            # Recorded by the turn's end (or the next ask), on the room's own task.
            question.close(Answer("withdrawn", reason="the asker stopped waiting for an answer"))
            raise
        await self._settle(question)
        assert question.answer is not None  # settled
        return question.answer.result()

    def _unanswered(self) -> str:
        """What a turn that timed out was waiting for, if it was a person's answer."""
        question = self._desk.questions.open
        if question is None or question.answer is not None:
            return ""
        return f": its question {question.id} to the room's people was not answered in time"

    async def _withdraw(self, turn: int) -> None:
        """The turn has ended: a question of it still open is withdrawn, visibly; but a
        room cancelled from outside (the daemon stopping) records nothing, as ever."""
        question = self._desk.questions.open
        if question is None or question.turn != turn:
            return
        question.close(Answer("withdrawn", reason=f"turn {turn} ended before anyone answered"))
        outside = isinstance(sys.exc_info()[1], anyio.get_cancelled_exc_class())
        if outside and self._requested is None:
            self._desk.questions.take(question)
            return
        await self._settle(question)

    async def _settle(self, question: OpenQuestion) -> None:
        """Record the ``ANSWER`` of ``question``, which has ended, once: whoever gets here
        first (its asker, the turn's end, the next ask) records it."""
        self._desk.questions.take(question)
        if question.recorded:
            return
        question.recorded = True
        answer = question.answer
        assert answer is not None
        # The person who answered; the room itself when it withdrew the question.
        who = self._room.member(answer.by) if answer.by is not None else None
        with anyio.CancelScope(shield=True):  # a withdrawal is recorded through a stop
            await self._journal.emit(
                AnswerEvent(
                    room_id=self._room.id,
                    turn=question.turn,
                    question=question.id,
                    action=answer.action,
                    content=answer.content,
                    reason=answer.reason,
                    agent_id=who.id if who else SYSTEM,
                    name=who.name if who else "System",
                    role=who.role if who else SYSTEM,
                ),
                when=lambda: not self._finishing,
            )

    def opening(self) -> DeltaEvent | None:
        """The ``DELTA`` that opened the turn in flight, for an observer arriving now."""
        if self.turn_open is None:
            return None
        member, turn = self.turn_open
        return msgspec.structs.replace(
            self._delta_event(member, turn, self._written),
            seq=self._state.last_seq,
            timestamp=self._opened_at,
            deadline=self._deadline,
        )

    def _delta(self, member: Member, turn: int, text: str) -> None:
        if not text:  # the turn opens
            self._written, self._opened_at = "", self._journal.now()
            event = self._delta_event(member, turn, "")
            self._journal.broadcast(msgspec.structs.replace(event, deadline=self._deadline))
            return
        at = len(self._written)
        self._written += text
        self._journal.broadcast(
            msgspec.structs.replace(self._delta_event(member, turn, text), at=at)
        )

    def _delta_event(self, member: Member, turn: int, text: str) -> DeltaEvent:
        draw, redraw = self._draw
        return DeltaEvent(
            room_id=self._room.id,
            agent_id=member.id,
            name=member.name,
            role=member.role,
            turn=turn,
            text=text,
            draw=draw,
            redraw=redraw,
        )

    def _message(self, request: TurnRequest, agent_id: str, text: str) -> MessageEvent:
        return self._said(self._room.member(agent_id), request.turn, text, step=request.step)

    def _said(
        self,
        member: Member,
        turn: int,
        text: str,
        *,
        step: Step | None = None,
        interjection: bool = False,
    ) -> MessageEvent:
        message = MessageEvent(
            room_id=self._room.id,
            agent_id=member.id,
            name=member.name,
            role=member.role,
            turn=turn,
            text=text,
            step=step,
            interjection=interjection,
        )
        # With an agenda, scored on the current point only: a new point starts afresh.
        score = convergence_score([*self._state.on_point, message])
        return msgspec.structs.replace(message, score=score)

    async def _failed(
        self, request: TurnRequest, error: str, code: int | None, attempt: int
    ) -> None:
        member = self._room.member(request.agent_id)
        log.info(
            "room.turn_failed", room=self._room.id, turn=request.turn, attempt=attempt, error=error
        )
        await self._journal.emit(
            ErrorEvent(
                room_id=self._room.id,
                agent_id=member.id,
                name=member.name,
                role=member.role,
                message=error,
                turn=request.turn,
                attempt=attempt,
                code=code,
            )
        )

    # -- people --------------------------------------------------------------------------

    def _plan(self, transcript: Sequence[MessageEvent]) -> TurnPlan | None:
        """The next turn; a person who just passed is not asked again at once, if another may
        speak."""
        passed, self._passed = self._passed, frozenset()
        absent = self._absent_people()
        plan = next_turn(self._room, transcript, absent | passed) if passed else None
        return plan or next_turn(self._room, transcript, absent)

    def _absent_people(self) -> frozenset[str]:
        present = self._desk.present
        return frozenset(m.id for m in self._room.members if m.human and m.id not in present)

    async def _record_interjections(self) -> None:
        if not self._room.people.interject:
            return
        for member_id, text in self._desk.take_queued():
            member = self._room.member(member_id)
            turn = self._state.current_turn + 1
            await self._journal.emit(self._said(member, turn, text, interjection=True))

    async def _human_turn(self, plan: TurnPlan) -> Verdict | None:
        """Wait for a person's message; record it, or skip them, or pause, at the deadline."""
        member, people = plan.speaker, self._room.people
        timeout = min(people.turn_timeout, self._person_wait or people.turn_timeout)
        self.turn_open, self._draw = (member, plan.turn), (0, "")
        self._deadline = self._journal.now() + round(timeout * 1000)
        self._delta(member, plan.turn, "")  # the turn is theirs: pages show "your turn"
        text: str | Passed | None = None
        try:
            with anyio.move_on_after(timeout):
                text = await self._desk.wait_for(member.id, plan.turn)
                if text is None:
                    return None  # they left (recorded by whoever saw them go): plan again
                if isinstance(text, Passed):
                    self._passed = frozenset({member.id})
                    return None
        finally:
            self.turn_open, self._deadline = None, None
        if text is None:
            why = f"did not answer turn {plan.turn} within {timeout:g} s"
            if people.at_timeout == "pause":
                return Verdict(StopReason.PAUSED, f"{member.name} {why}")
            if self._desk.depart(member.id):
                await self._journal.emit(
                    AgentLeftEvent(
                        room_id=self._room.id,
                        agent_id=member.id,
                        name=member.name,
                        role=member.role,
                        reason=why,
                    )
                )
            return None
        assert not isinstance(text, Passed)  # a pass returned above
        await self._journal.emit(self._said(member, plan.turn, text))
        return await self._judge()

    async def _wait_for_people(self) -> Verdict | None:
        """Until someone who could speak is here; past ``person_wait``, a resumable stop."""
        now = anyio.current_time()
        if self._idle_since is None:
            self._idle_since = now
        wait = math.inf if self._person_wait is None else self._person_wait
        with anyio.move_on_after(self._idle_since + wait - now):
            await self._desk.wait_changed()
            return None
        away = [m.name for m in self._room.members if m.id in self._absent_people()]
        return Verdict(
            StopReason.AGENT_LOST,
            f"waited {self._person_wait:g} s for {', '.join(away) or 'people'} to come back "
            "(only they could speak); resume when they are here",
        )

    async def _went_away(self, agent_id: str) -> bool:
        if agent_id in self._away:
            return True
        if self._presence is None or self._presence(agent_id):
            return False
        await self._set_presence(agent_id, False)
        return True

    async def _wait_for_members(self) -> Verdict | None:
        while self._away:
            changed = self._changed = anyio.Event()
            now = anyio.current_time()
            verdict = check_agent_lost(self._room, self._away, now)
            if verdict is not None:
                return verdict
            deadline = lost_deadline(self._room, self._away)
            assert deadline is not None
            with anyio.move_on_after(deadline - now):
                await changed.wait()
        return None


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error a task group raised (what it wraps), or the group if it holds several."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return group
