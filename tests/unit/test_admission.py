"""The connection pools' rules, without sockets: who is evicted, who is refused, who is counted."""

from __future__ import annotations

import pytest

from transports import Standing, Vouched
from transports._admission import HOLDER_FULL, POOL_FULL, Admission, Slot

# A slot's cancel scope needs a running loop, not any I/O.
pytestmark = pytest.mark.anyio


def _known(admission: Admission, holder: str | None, *, busy: bool = True) -> Slot:
    slot = admission.enter()
    assert slot is not None
    assert admission.promote(slot, Vouched(Standing.KNOWN, holder)) is None
    slot.evictable = not busy
    return slot


async def test_a_holder_at_its_bound_is_refused_while_others_are_admitted() -> None:
    admission = Admission(strangers=10, known=10, reserved=0, per_holder=2)
    held = [_known(admission, "token:hog"), _known(admission, "token:hog")]
    third = admission.enter()
    assert third is not None
    assert admission.promote(third, Vouched(Standing.KNOWN, "token:hog")) == HOLDER_FULL
    assert third.standing is Standing.STRANGER and admission.held_by("token:hog") == 2
    assert not any(slot.scope.cancel_called for slot in held)
    _known(admission, "token:fair")  # another holder is not touched by the hog's bound
    assert admission.held_by("token:fair") == 1


async def test_a_holder_at_its_bound_makes_room_with_its_own_oldest_idle_connection() -> None:
    admission = Admission(strangers=10, known=10, reserved=0, per_holder=2)
    other = _known(admission, "token:other", busy=False)
    oldest = _known(admission, "token:a", busy=False)
    newer = _known(admission, "token:a", busy=False)
    third = _known(admission, "token:a")
    assert oldest.scope.cancel_called and not newer.scope.cancel_called
    assert not other.scope.cancel_called  # an older idle connection of someone else stays
    assert admission.held_by("token:a") == 2 and admission.known == 3
    admission.leave(third)
    admission.leave(newer)
    assert admission.held_by("token:a") == 0


async def test_streams_count_towards_their_holder_and_are_never_evicted() -> None:
    admission = Admission(strangers=10, known=10, reserved=0, per_holder=1)
    stream = _known(admission, "token:a", busy=False)
    stream.upgraded = True
    refused = admission.enter()
    assert refused is not None
    assert admission.promote(refused, Vouched(Standing.KNOWN, "token:a")) == HOLDER_FULL
    assert not stream.scope.cancel_called


async def test_the_privileged_and_unnamed_holders_are_not_counted() -> None:
    admission = Admission(strangers=10, known=10, reserved=2, per_holder=1)
    for _ in range(3):
        slot = admission.enter()
        assert slot is not None
        assert admission.promote(slot, Vouched(Standing.PRIVILEGED, "token:admin")) is None
        assert admission.promote(admission.enter() or Slot(), Standing.KNOWN) is None
    assert admission.held_by("token:admin") == 0
    # A known connection that later shows privileged credentials leaves its holder's count.
    slot = _known(admission, "token:b")
    assert admission.promote(slot, Vouched(Standing.PRIVILEGED, "token:b")) is None
    assert admission.held_by("token:b") == 0 and slot.holder is None


async def test_the_pool_bound_still_holds_under_the_holders_bound() -> None:
    admission = Admission(strangers=10, known=2, reserved=0, per_holder=5)
    _known(admission, "token:a")
    _known(admission, "token:b")
    slot = admission.enter()
    assert slot is not None
    assert admission.promote(slot, Vouched(Standing.KNOWN, "token:c")) == POOL_FULL
    assert admission.held_by("token:c") == 0
