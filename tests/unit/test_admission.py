"""The connection pools' rules, without sockets: who is evicted, who is refused, who is counted."""

from __future__ import annotations

import pytest

from transports._admission import HOLDER_FULL, POOL_FULL, Admission, Slot, Standing, Vouched

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


def _stream(admission: Admission, holder: str | None) -> Slot:
    slot = _known(admission, holder)
    slot.upgraded = True
    return slot


def _promote(admission: Admission, vouched: Vouched) -> tuple[Slot, str | None]:
    """A new connection vouched for, then busy (as the server marks one it answers)."""
    slot = admission.enter()
    assert slot is not None
    refused = admission.promote(slot, vouched)
    slot.evictable = False
    return slot, refused


async def test_a_full_pool_closes_the_largest_holders_newest_stream_for_a_smaller_one() -> None:
    admission = Admission(strangers=10, known=4, reserved=0, per_holder=None)
    big = [_stream(admission, "token:big") for _ in range(3)]
    small = _stream(admission, "token:small")
    newcomer, refused = _promote(admission, Vouched(Standing.KNOWN, "token:new"))
    assert refused is None and newcomer.holder == "token:new"
    assert big[-1].scope.cancel_called and big[-1].evicted_for == POOL_FULL
    assert not any(slot.scope.cancel_called for slot in (*big[:-1], small))
    assert admission.held_by("token:big") == 2 and admission.known == 4


async def test_an_idle_keepalive_goes_before_any_stream_the_largest_holders_first() -> None:
    admission = Admission(strangers=10, known=4, reserved=0, per_holder=None)
    small_idle = _known(admission, "token:small", busy=False)
    streams = [_stream(admission, "token:big") for _ in range(2)]
    big_idle = _known(admission, "token:big", busy=False)
    _, refused = _promote(admission, Vouched(Standing.KNOWN, "token:new"))
    assert refused is None
    assert big_idle.scope.cancel_called and big_idle.evicted_for is None
    assert not small_idle.scope.cancel_called
    assert not any(slot.scope.cancel_called for slot in streams)


async def test_no_one_is_closed_when_every_holder_has_at_most_the_newcomers_share() -> None:
    admission = Admission(strangers=10, known=4, reserved=0, per_holder=None)
    held = [_stream(admission, f"token:{n % 2}") for n in range(4)]  # two each
    # A third holder would hold 1, the others 2 left after one closes: it gets in...
    third, refused = _promote(admission, Vouched(Standing.KNOWN, "token:2"))
    assert refused is None and sum(s.scope.cancel_called for s in held) == 1
    # ...and the holder that lost one does not take it back (1 + 1 is not less than 2).
    _, refused = _promote(admission, Vouched(Standing.KNOWN, "token:0"))
    assert refused == POOL_FULL
    assert sum(s.scope.cancel_called for s in held) == 1 and not third.scope.cancel_called


async def test_busy_requests_are_never_closed_for_fairness() -> None:
    admission = Admission(strangers=10, known=3, reserved=0, per_holder=None)
    busy = [_known(admission, "token:big") for _ in range(3)]  # answering, not streams
    _, refused = _promote(admission, Vouched(Standing.KNOWN, "token:new"))
    assert refused == POOL_FULL and not any(slot.scope.cancel_called for slot in busy)


async def test_the_privileged_past_their_reserve_also_take_a_fair_share() -> None:
    admission = Admission(strangers=10, known=2, reserved=1, per_holder=None)
    hog = [_stream(admission, "token:hog") for _ in range(2)]
    admin, refused = _promote(admission, Vouched(Standing.PRIVILEGED))
    assert refused is None and not any(slot.scope.cancel_called for slot in hog)  # the reserve
    admin.upgraded = True
    _, refused = _promote(admission, Vouched(Standing.PRIVILEGED))
    assert refused is None and hog[-1].scope.cancel_called  # past it: the hog's newest
