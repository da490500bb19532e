"""Who may sit where: the owner's join rule, held seats and look-alike names (pure checks)."""

from __future__ import annotations

import json

import pytest

from mesh import Forbidden
from mesh.rooms import InvalidRoomSpec, Member, Room, RoomConflict, decode_room_spec
from mesh.rooms._model import People, RoomId
from mesh.rooms._people import (
    Desk,
    check_join,
    check_lookalike,
    check_seat,
    skeleton,
    uts39_skeleton,
)
from registry import AgentId


def _room(join: str | tuple[str, ...] = "owner") -> Room:
    members = (
        Member(id=AgentId("alice"), name="Alice", role="host"),
        Member(id=AgentId("carol"), name="Carol", role="person", kind="human"),
    )
    people = People(join=join)  # type: ignore[arg-type]
    return Room(id=RoomId("r"), topic="t", members=members, people=people, owner="token:own")


@pytest.mark.parametrize(
    "name",
    [
        "Carol",
        "C\u0430rol",  # Cyrillic a
        "\uff23\uff21\uff32\uff2f\uff2c",  # fullwidth
        "Caro1",
        "CaroI",
        "  carol  ",
        "\u13dfarol",  # Cherokee letter tli
        "\u1d04arol",  # small capital c
        "Ca\u0433ol",  # Cyrillic ghe
        "\U0001d402\U0001d41a\U0001d42b\U0001d428\U0001d425",  # mathematical bold
    ],
)
def test_look_alikes_share_a_skeleton(name: str) -> None:
    assert skeleton(name) == "carol"


def test_the_skeleton_is_unicodes() -> None:
    # UTS #39's own: case kept, m read as rn (not the other way round), digits as letters.
    assert uts39_skeleton("Carol") == "Carol"
    assert uts39_skeleton("m") == uts39_skeleton("rn") == "rn"
    assert uts39_skeleton("0I1|") == "Olll"
    assert skeleton("Mary") == skeleton("rnary") == skeleton("Ma-ry!")


def test_different_names_keep_different_skeletons() -> None:
    assert len({skeleton(n) for n in ("Carol", "Carl", "Karol", "Caroline", "Bob")}) == 5
    assert skeleton("Ma\u0436ia") != skeleton("Maria")  # a Cyrillic letter that imitates none


def test_the_owner_chooses_who_joins() -> None:
    check_join(_room(), None, None)  # the embedding program
    check_join(_room(), "token:adm", "adm", admin=True)
    check_join(_room(), "token:own", "own")
    with pytest.raises(Forbidden, match=r"admits its owner \(people.join\); token 'dev'"):
        check_join(_room(), "token:dev", "dev")
    check_join(_room("clients"), "token:dev", "dev")
    check_join(_room(("dev",)), "token:dev", "dev")
    with pytest.raises(Forbidden, match=r"its owner and the tokens \['dev'\]"):
        check_join(_room(("dev",)), "token:eve", "eve")


def test_a_held_seat_is_its_holders() -> None:
    check_seat("r", "carol", None, "token:any")  # nobody holds it yet
    check_seat("r", "carol", "token:c", "token:c")
    check_seat("r", "carol", "token:c", None)  # the embedding program
    check_seat("r", "carol", "token:c", "token:a", admin=True)  # an admin acts for anyone
    check_seat("r", "carol", "token:c@B", "token:c@B")  # her token, named with its daemon
    with pytest.raises(Forbidden, match="held by another token"):
        check_seat("r", "carol", "token:c", "token:m")
    # A token is valid on its own daemon only: the same id at another daemon is another token.
    with pytest.raises(Forbidden, match="held by another token"):
        check_seat("r", "carol", "token:c@B", "token:c@A")
    with pytest.raises(Forbidden, match="held by another token"):
        check_seat("r", "carol", "token:c", "token:c@A")


def test_a_name_that_passes_for_a_members_is_refused() -> None:
    check_lookalike(_room(), "carol", "Carol")  # her own seat again
    check_lookalike(_room(), "dave", "Dave")
    with pytest.raises(RoomConflict, match="looks like 'Carol'"):
        check_lookalike(_room(), "c-rol", "C\u0430rol")
    with pytest.raises(RoomConflict, match="looks like 'Alice'"):
        check_lookalike(_room(), "a1ice", "A1ice")


def test_the_join_rule_is_bounded_and_spelled_out() -> None:
    def spec(join: object) -> str:
        return json.dumps({"topic": "t", "members": ["a", "b"], "people": {"join": join}})

    assert decode_room_spec(spec(["ann", "bob"])).people.join == ("ann", "bob")
    assert decode_room_spec(spec("clients")).people.join == "clients"
    for bad in ("anyone", ["x"] * 65, [""], ["x" * 65]):
        with pytest.raises(InvalidRoomSpec, match=r"\$\.people\.join"):
            decode_room_spec(spec(bad))


def test_names_of_punctuation_alone_pass_for_nobody() -> None:
    room = _room()
    room = Room(
        id=room.id,
        topic="t",
        members=(*room.members, Member(id=AgentId("person"), name="???", kind="human")),
    )
    check_lookalike(room, "person-2", "!!!")


def test_a_present_persons_seat_is_refused_to_another_token_as_a_403() -> None:
    desk = Desk()
    assert desk.arrive("carol", "token:c@B")
    desk.check_holder("carol", "token:c@B")  # her token, named with its daemon
    desk.check_holder("carol", "token:adm", admin=True)
    with pytest.raises(Forbidden, match="under another token"):  # its id, at another daemon
        desk.check_holder("carol", "token:c@A")
    with pytest.raises(Forbidden, match="under another token"):  # 403, not a conflict
        desk.check_holder("carol", "token:m")
    with pytest.raises(Forbidden):
        desk.arrive("carol", "token:m")
