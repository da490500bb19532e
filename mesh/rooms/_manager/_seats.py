"""People in the rooms of a manager: taking a seat, leaving it, and saying something.

A person's seat is a member of kind ``human``; the room's
:class:`~mesh.rooms._people.Desk` knows who is present and carries their words
to the engine (see :mod:`mesh.rooms._people`).

Who may sit where is checked where the person comes in, before anything is
forwarded to the daemon that runs the room: the room's ``people.join``,
look-alike names, the door for every agent their words would reach, and the
seat's holder (recorded with the room, and checked again by the daemon that
records). A forwarded request was checked by the daemon it came from.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec

from mesh._logging import get_logger
from mesh._orchestrator.access import Principal
from mesh.rooms._errors import InvalidRoomSpec, RoomConflict
from mesh.rooms._events import AgentJoinedEvent, AgentLeftEvent, AnswerEvent
from mesh.rooms._manager._table import Authorize, HeldRoom, RoomTable, checked, in_thread
from mesh.rooms._mesh import ROOM_TURN
from mesh.rooms._model import Member, Room, RoomStatus
from mesh.rooms._people import (
    check_join,
    check_lookalike,
    check_seat,
    clean_name,
    clean_text,
    person_id,
)
from mesh.rooms._questions import Answer
from mesh.rooms._replica import Forwarded, PersonOp, qualified
from registry import AgentId

__all__ = ["Seats"]

log = get_logger("mesh.rooms")


class Seats:
    """Joins, leaves and messages of the people in ``table``'s rooms."""

    def __init__(self, table: RoomTable, authorize: Authorize | None = None) -> None:
        self._table = table
        self._authorize = authorize

    def _here(self, holder: str | None) -> str | None:
        """A holder that comes in here, named as the cluster names it (qualified by this
        daemon, whose token it is), so that it is recorded and compared the same way
        wherever the room runs; unchanged without a cluster."""
        replica = self._table.replica
        return qualified(holder, replica.daemon if replica is not None else None)

    async def join(
        self,
        room_id: str,
        name: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> Member:
        name = checked(clean_name, name)
        seat_id = AgentId(person_id(name))
        room = await self._table.load(room_id)
        if forward:  # it comes in here: check it here
            holder = self._here(holder)
            _check_join(room, holder, person)
            check_lookalike(room.state.room, seat_id, name)
            self._check_person(room, seat_id, holder, person)
            forwarded = await self._forward(room, "join", person, name=name, holder=holder)
            if forwarded is not None:
                return msgspec.convert(forwarded.result, Member)
        return await self._take_seat(room, seat_id, name, holder, person)

    def _check_person(
        self, room: HeldRoom, member_id: str, holder: str | None, person: Principal | None
    ) -> None:
        """The seat's holder, and the door for every agent of the room (a person's words
        reach them all)."""
        _check_seat(room, member_id, holder, person)
        if self._authorize is None or person is None:
            return
        state_room: Room = room.state.room
        for member in state_room.members:
            if not member.human:
                self._authorize(member.id, ROOM_TURN, person.in_room(state_room.id))

    async def _forward(
        self, room: HeldRoom, op: PersonOp, person: Principal | None, **args: Any
    ) -> Forwarded | None:
        """The holder's answer to a person's ``op`` on a room this daemon does not run
        (only the holder records); None if it runs here, or nowhere else."""
        replica = self._table.replica
        if replica is None or room.runner is not None:
            return None
        return await replica.forward_person(room.state.room.id, op, args, person)

    async def _take_seat(
        self,
        room: HeldRoom,
        member_id: AgentId,
        name: str,
        holder: str | None,
        person: Principal | None = None,
    ) -> Member:
        room_id = room.state.room.id
        async with room.control:  # the holder as recorded by any join before this one
            _check_seat(room, member_id, holder, person)
            state = room.state
            if state.room.mode == "review":
                raise RoomConflict(
                    "a review is between two agents; people join chats", room=room_id
                )
            if state.status is RoomStatus.STOPPED:
                raise RoomConflict(
                    f"room {room_id!r} has stopped ({state.stop_reason})", room=room_id
                )
            seat = next((m for m in state.room.members if m.id == member_id), None)
            if seat is not None and not seat.human:
                raise RoomConflict(
                    f"{member_id!r} is an agent of room {room_id!r}: join under another name",
                    room=room_id,
                )
            if seat is None:
                people = sum(m.human for m in state.room.members)
                if people >= state.room.people.max_people:
                    raise RoomConflict(
                        f"room {room_id!r} is full: {people} people of "
                        f"{state.room.people.max_people}",
                        room=room_id,
                    )
                seat = Member(id=member_id, name=name, role="person", kind="human")
            if not room.desk.arrive(seat.id, holder, admin=_admin(person)):
                return seat  # already here (a second tab, a reconnect)
            new = seat if all(m.id != seat.id for m in state.room.members) else None
            try:
                async with self._table.leased(room):
                    await room.journal.emit(
                        AgentJoinedEvent(
                            room_id=state.room.id,
                            agent_id=seat.id,
                            name=seat.name,
                            role=seat.role,
                            member=new,
                            holder=holder,
                            by=person.name if person is not None else None,
                        )
                    )
            except BaseException:
                room.desk.depart(seat.id)  # not recorded: not present
                raise
            log.info("room.person_joined", room=room_id, member=seat.id, new=new is not None)
            return seat

    async def leave(
        self,
        room_id: str,
        member_id: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> None:
        room = await self._table.load(room_id)
        if forward:
            holder = self._here(holder)
            _check_seat(room, member_id, holder, person)
            forwarded = await self._forward(room, "leave", person, member=member_id, holder=holder)
            if forwarded is not None:
                return
        member = self._person(room, member_id)
        _check_holder(room, member.id, holder, person)
        async with room.control:
            if room.desk.depart(member.id):
                await room.journal.emit(
                    AgentLeftEvent(
                        room_id=room.state.room.id,
                        agent_id=member.id,
                        name=member.name,
                        role=member.role,
                        reason="left",
                    )
                )

    async def say(
        self,
        room_id: str,
        member_id: str,
        text: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> dict[str, Any]:
        text = checked(clean_text, text)
        room = await self._table.load(room_id)
        if forward:  # a person back after being away is checked as they join
            holder = self._here(holder)
            if member_id not in room.desk.present:
                _check_join(room, holder, person)
            self._check_person(room, member_id, holder, person)
            args = {"member": member_id, "text": text, "holder": holder}
            forwarded = await self._forward(room, "say", person, **args)
            if forwarded is not None:
                return cast(dict[str, Any], forwarded.result)
        member = self._person(room, member_id)
        if room.runner is None:
            raise RoomConflict(
                f"room {room_id!r} is {room.state.status}: messages are taken while it runs",
                room=room_id,
            )
        _check_holder(room, member.id, holder, person)
        if member.id not in room.desk.present:  # back: present again
            await self._take_seat(room, member.id, member.name, holder, person)
        awaited = room.desk.awaiting()
        status = room.desk.offer(member.id, text, interject=room.state.room.people.interject)
        turn = awaited[1] if status == "turn" and awaited else room.state.current_turn + 1
        return {"status": status, "turn": turn, "member": member.id}

    async def pass_turn(
        self,
        room_id: str,
        member_id: str,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> None:
        room = await self._table.load(room_id)
        if forward:
            holder = self._here(holder)
            _check_seat(room, member_id, holder, person)
            args = {"member": member_id, "holder": holder}
            if await self._forward(room, "pass", person, **args) is not None:
                return
        member = self._person(room, member_id)
        _check_holder(room, member.id, holder, person)
        if room.runner is None:  # not running, or its turns are taken on another daemon
            status = room.state.status
            why = (
                "has no daemon running it right now (it is being taken over): try again"
                if status is RoomStatus.RUNNING
                else f"is {status}: there is no turn to pass"
            )
            raise RoomConflict(f"room {room_id!r} {why}", room=room_id)
        room.desk.pass_turn(member.id)

    async def _ended_in_log(self, room: HeldRoom, qid: str) -> RoomConflict | None:
        """Why an answer to ``qid`` is refused, read from the room's log: a stopped room
        nobody watches is let go of, and the copy held again has no memory of its questions.
        None if the log has no ``ANSWER`` to it."""
        room_id = room.state.room.id
        events = await in_thread(self._table.store.events, room_id, 0)
        ended = next(
            (e for e in reversed(events) if isinstance(e, AnswerEvent) and e.question == qid),
            None,
        )
        if ended is None:
            return None
        by = None if ended.action == "withdrawn" else ended.agent_id
        room.desk.questions.remember(qid, Answer(ended.action, ended.content, by, ended.reason))
        return room.desk.questions.closed(room_id, qid)

    async def answer(
        self,
        room_id: str,
        member_id: str,
        question: str,
        action: str,
        content: dict[str, Any] | None = None,
        *,
        holder: str | None = None,
        person: Principal | None = None,
        forward: bool = True,
    ) -> dict[str, Any]:
        """A person's answer to the question a member put to the room's people.

        Only a person present in the room (their seat's holder, or an admin) answers,
        and only the question open now; the room records the ``ANSWER`` and the
        member's turn goes on with it. A room another daemon runs gets the answer
        there, where its question is open.
        """
        room = await self._table.load(room_id)
        if forward:
            holder = self._here(holder)
        member = self._person(room, member_id)
        _check_holder(room, member.id, holder, person)
        if forward:
            answered = {"question": question, "action": action, "content": content}
            forwarded = await self._forward(
                room, "answer", person, member=member.id, holder=holder, **answered
            )
            if forwarded is not None:
                return cast(dict[str, Any], forwarded.result)
        if room.runner is None:  # not running here, nor anywhere that would take it
            refused = room.desk.questions.closed(room_id, question)
            if refused is None:  # held again since it stopped: its log knows what ended
                refused = await self._ended_in_log(room, question)
            if refused is not None:  # the answer that ended its turn came first
                raise refused
            raise RoomConflict(
                f"room {room_id!r} has no turn in flight here: there is no question to answer",
                room=room_id,
            )
        if member.id not in room.desk.present:
            raise RoomConflict(
                f"{member.id!r} is not present in room {room_id!r}: a room's questions are"
                " answered by the people present (join first)",
                room=room_id,
            )
        asked = room.desk.questions.answer(room_id, question, member.id, action, content)
        log.info("room.answered", room=room_id, question=asked.id, member=member.id)
        return {"status": "answered", "question": asked.id, "member": member.id}

    @staticmethod
    def _person(room: HeldRoom, member_id: str) -> Member:
        try:
            member = room.state.room.member(member_id)
        except KeyError:
            member = None
        if member is None or not member.human:
            raise InvalidRoomSpec(
                f"{member_id!r} is not a person in room {room.state.room.id!r}: join first",
                room=room.state.room.id,
            )
        return member


def _admin(person: Principal | None) -> bool:
    """Whether ``person`` is an admin token, which may act as any person (never the
    embedding program's None: that one passes ``holder`` None instead)."""
    return person is not None and person.admin


def _check_join(room: HeldRoom, holder: str | None, person: Principal | None) -> None:
    by = person.name if person is not None else None
    check_join(room.state.room, holder, by, admin=_admin(person))


def _check_seat(
    room: HeldRoom, member_id: str, holder: str | None, person: Principal | None
) -> None:
    """The seat's recorded holder against ``holder`` (admins may act as anyone)."""
    held = room.state.holders.get(member_id)
    check_seat(room.state.room.id, member_id, held, holder, admin=_admin(person))


def _check_holder(
    room: HeldRoom, member_id: str, holder: str | None, person: Principal | None
) -> None:
    """The recorded holder, and the token a present person came in with."""
    _check_seat(room, member_id, holder, person)
    room.desk.check_holder(member_id, holder, admin=_admin(person))
