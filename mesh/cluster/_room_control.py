"""Operations on a room sent to the daemon that runs it, and answered there.

Only a room's holder records its events, so a daemon asked to pause, stop or
resume a room it does not run, or to seat a person there, take their words or
let them go or pass their turn, asks the holder (``mesh/room-control`` on the
link between the two daemons, :meth:`~mesh.cluster._calls.RemoteCalls.ask`) and
answers with what the holder answered. The holder applies what it is asked as it
would a request of its own, never forwarding it again: two daemons that briefly
disagree about who runs a room cannot bounce an operation between them. A
person's seat holder is qualified by the daemon the person came through (tokens
belong to their daemon), so a token of one daemon cannot speak for a person
seated through another's token of the same name.

The link carries only frames their sender signed, so the holder knows which
daemon asks, and the asker takes only the holder's answer. A person's seat holder
must be qualified by the daemon that asks (a daemon speaks for its own tokens
only); one that names no holder (an admin or the embedding program of the daemon
that asked) is that daemon's ``daemon@<id>``, never an admin here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import msgspec

from mesh._errors import Forbidden, InvalidParams, MeshError
from mesh._orchestrator.access import Principal
from mesh.cluster._calls import ROOM_CONTROL_METHOD
from mesh.cluster._settings import Names
from mesh.cluster._wire import RoomControl, RoomControlReply
from mesh.rooms import (
    InvalidRoomSpec,
    RoomConflict,
    RoomError,
    RoomManager,
    RoomNotFound,
    RoomSnapshot,
)
from mesh.rooms._replica import Forwarded, PersonOp, RoomOp, qualified

__all__ = ["Ask", "RoomControls"]

#: Asking the holder to act on a room gets this long.
CONTROL_TIMEOUT: Final = 10.0


class Ask(Protocol):
    """Asks a daemon a method on the link to it and returns its answer
    (the cluster's calls: :meth:`~mesh.cluster._calls.RemoteCalls.ask`)."""

    def __call__(
        self, holder: str, method: str, params: Any, *, timeout: float
    ) -> Awaitable[Any]: ...


class RoomControls:
    """Asks holders to act on their rooms, and answers such requests for ours."""

    def __init__(
        self,
        names: Names,
        rooms: RoomManager,
        holder_of: Callable[[str], Awaitable[str | None]],
        ask: Ask,
    ) -> None:
        self._ask_holder = ask
        self._names = names
        self._rooms = rooms
        self._holder_of = holder_of

    # -- asking ------------------------------------------------------------------------------

    async def forward(
        self, room_id: str, op: RoomOp, *, by: str | None = None, person: Principal | None = None
    ) -> RoomSnapshot | None:
        """``op`` the room where it runs, asked by ``by`` (qualified by this daemon), who
        that daemon checks against the room's owner; None if it runs here or nowhere."""
        control = RoomControl(room=room_id, op=op, holder=self._qualify(by), person=person)
        reply = await self._ask(control)
        return None if reply is None else msgspec.convert(reply.snapshot, RoomSnapshot)

    async def forward_person(
        self,
        room_id: str,
        op: PersonOp,
        args: dict[str, Any],
        person: Principal | None = None,
    ) -> Forwarded | None:
        holder = args.get("holder")
        reply = await self._ask(
            RoomControl(
                room=room_id,
                op=op,
                name=args.get("name") or "",
                member=args.get("member") or "",
                text=args.get("text") or "",
                question=args.get("question") or "",
                action=args.get("action") or "",
                content=args.get("content"),
                holder=self._qualify(holder),
                person=person,
            )
        )
        return None if reply is None else Forwarded(reply.result)

    def _qualify(self, identity: str | None) -> str | None:
        return qualified(identity, self._names.daemon)

    async def _ask(self, control: RoomControl) -> RoomControlReply | None:
        """The holder's answer to ``control``; None if no other daemon holds the room."""
        room_id = control.room
        try:
            holder = await self._holder_of(room_id)
            if holder is None or holder == self._names.daemon:
                return None
            params = msgspec.to_builtins(control)
            answer = await self._ask_holder(
                holder, ROOM_CONTROL_METHOD, params, timeout=CONTROL_TIMEOUT
            )
            reply = msgspec.convert(answer, RoomControlReply)
        except MeshError as exc:  # no answer, or none it could trust (a ClusterError too)
            raise RoomConflict(
                f"room {room_id!r} runs on another daemon: {exc}", room=room_id
            ) from exc
        except msgspec.ValidationError as exc:
            raise RoomConflict(
                f"room {room_id!r}: its daemon's answer was unreadable: {exc}", room=room_id
            ) from exc
        if reply.error is not None:
            if reply.kind == "not_found":
                raise RoomNotFound(room_id)
            if reply.kind == "forbidden":  # a seat another token holds: 403, as here
                raise Forbidden(reply.error)
            if reply.kind == "invalid":  # an answer that does not fit: 400, as here
                raise InvalidRoomSpec(reply.error, room=room_id)
            raise RoomConflict(reply.error, room=room_id)
        return reply

    # -- answering -----------------------------------------------------------------------------

    async def answer(self, params: Any, signer: str) -> Any:
        """Do what daemon ``signer`` (whose link the request came on) asks of a room we
        hold; the answer says why not, as the asker's own manager would."""
        try:
            asked = msgspec.convert(params, RoomControl)
        except msgspec.ValidationError as exc:
            raise InvalidParams(f"invalid room control from daemon {signer!r}: {exc}") from None
        reply: RoomControlReply
        try:
            await _check_steering(self._rooms, asked, signer)
            reply = await _apply(self._rooms, _vouched(asked, signer))
        except RoomNotFound as exc:
            reply = RoomControlReply(error=str(exc), kind="not_found")
        except InvalidRoomSpec as exc:
            reply = RoomControlReply(error=str(exc), kind="invalid")
        except RoomError as exc:
            reply = RoomControlReply(error=str(exc), kind="conflict")
        except Forbidden as exc:  # the seat's holder, checked again where it is recorded
            reply = RoomControlReply(error=str(exc), kind="forbidden")
        return msgspec.to_builtins(reply)


def _vouched(control: RoomControl, signer: str) -> RoomControl:
    """``control`` as ``signer`` may vouch for it: the seat's holder one of its own tokens
    (qualified by it), or else the daemon itself; the person a client token, and never an
    admin here (a token is valid on its own daemon only)."""
    holder, person = control.holder, control.person
    if holder is None:
        holder = f"daemon@{signer}"
    elif holder.rpartition("@")[2] != signer:
        raise Forbidden(
            f"daemon {signer!r} asks for {control.op!r} in room {control.room!r} as {holder!r}, "
            f"an identity of another daemon; a daemon speaks for its own tokens only "
            "(room control between daemons)"
        )
    if person is not None:
        if person.kind != "client":
            raise Forbidden(
                f"daemon {signer!r} asks for {control.op!r} in room {control.room!r} for "
                f"{person.describe()}; a person is a client token of the daemon that asks"
            )
        person = msgspec.structs.replace(person, admin=False, room=None)
    return msgspec.structs.replace(control, holder=holder, person=person)


#: What only a room's owner (or an admin of the daemon the owner's token belongs to) asks.
_STEERING: Final = frozenset({"pause", "stop", "resume"})


async def _check_steering(rooms: RoomManager, control: RoomControl, signer: str) -> None:
    """Refuse a pause, stop or resume another daemon asks for anyone but the room's owner,
    or an admin of the owner's own daemon (tokens, and their rooms, belong to one daemon).
    A room with no owner (an embedding program's) is the operators': an admin's or an
    embedding program's."""
    if control.op not in _STEERING:
        return
    owner = (await rooms.get(control.room)).room.owner
    by = control.holder
    admin = control.person is not None and control.person.admin and control.person.kind == "client"
    if owner is None:  # an embedding program's room: the operators', as on one daemon
        if by is None or admin:
            return
        raise Forbidden(
            f"room {control.room!r} belongs to the daemons' operators; only an admin or an "
            f"embedding program may {control.op} it"
        )
    owners_daemon = owner.rpartition("@")[2] if owner is not None and "@" in owner else None
    if owners_daemon != signer:
        raise Forbidden(
            f"daemon {signer!r} may not {control.op} room {control.room!r}: its owner's token "
            "belongs to another daemon (room control between daemons)"
        )
    if by is not None and by == owner:
        return
    if not admin or by is None or by.rpartition("@")[2] != signer:
        raise Forbidden(
            f"room {control.room!r} belongs to another identity; only its owner or an admin "
            f"of daemon {signer!r} may {control.op} it"
        )


async def _apply(rooms: RoomManager, control: RoomControl) -> RoomControlReply:
    """Do what another daemon asked of a room, here, without forwarding it again."""
    room_id, member = control.room, control.member
    seat: dict[str, Any] = {"holder": control.holder, "person": control.person, "forward": False}
    result: Any = None
    if control.op == "join":
        result = await rooms.join(room_id, control.name, **seat)
    elif control.op == "leave":
        await rooms.leave(room_id, member, **seat)
    elif control.op == "pass":
        await rooms.pass_turn(room_id, member, **seat)
    elif control.op == "say":
        result = await rooms.say(room_id, member, control.text, **seat)
    elif control.op == "answer":
        result = await rooms.answer(
            room_id, member, control.question, control.action, control.content, **seat
        )
    else:
        operations = {"pause": rooms.pause, "stop": rooms.stop, "resume": rooms.resume}
        snapshot = await operations[control.op](room_id, forward=False)
        return RoomControlReply(snapshot=msgspec.to_builtins(snapshot))
    return RoomControlReply(result=msgspec.to_builtins(result))
