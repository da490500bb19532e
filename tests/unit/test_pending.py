"""The pending-call table alone: correlation, deadlines pushed out by progress up to a cap,
and the four ways a call ends. Pure: the clock is a number passed in."""

from __future__ import annotations

from mesh._rpc.pending import PendingCalls


def table() -> PendingCalls[str, str | None]:
    return PendingCalls(max_duration=100.0)


def test_an_answer_finds_its_call_once() -> None:
    calls = table()
    calls.start("a", "info a", now=0.0, timeout=10.0)
    calls.start("b", "info b", now=0.0, timeout=10.0)
    answered = calls.finish("b")
    assert answered is not None and answered.info == "info b"
    assert calls.finish("b") is None  # a late or duplicate answer: not ours any more
    assert calls.finish("never") is None
    assert "a" in calls and "b" not in calls and len(calls) == 1


def test_the_deadline_passes_and_the_call_is_handed_back_once() -> None:
    calls = table()
    calls.start("slow", "x", now=0.0, timeout=10.0)
    calls.start("quick", "y", now=0.0, timeout=5.0)
    assert calls.next_deadline() == 5.0
    assert calls.expired(4.9) == []
    assert [call.key for call in calls.expired(5.0)] == ["quick"]
    assert calls.next_deadline() == 10.0
    assert [call.key for call in calls.expired(99.0)] == ["slow"]
    assert calls.expired(200.0) == [] and calls.next_deadline() is None


def test_progress_pushes_the_deadline_out_but_never_past_the_cap() -> None:
    calls = table()
    calls.start("chatty", None, now=0.0, timeout=30.0)
    progressed = calls.progressed("chatty", now=20.0)
    assert progressed is not None and progressed.deadline == 50.0
    assert calls.next_deadline() == 50.0
    assert calls.expired(49.0) == []
    calls.progressed("chatty", now=95.0)  # 125 would pass the cap of 100
    assert calls.get("chatty") is not None and calls.next_deadline() == 100.0
    assert [call.key for call in calls.expired(100.0)] == ["chatty"]
    assert calls.progressed("chatty", now=101.0) is None  # ended: progress is ignored


def test_a_call_longer_than_the_cap_keeps_its_own_timeout() -> None:
    calls = table()
    call = calls.start("long", None, now=0.0, timeout=500.0)
    assert call.deadline == call.hard_deadline == 500.0
    calls.progressed("long", now=400.0)
    assert calls.next_deadline() == 500.0


def test_abandoning_says_whether_the_peer_must_be_told() -> None:
    calls = table()
    calls.start("a", None, now=0.0, timeout=10.0)
    assert calls.abandon("a") is not None  # still in flight: tell the peer to cancel
    assert calls.abandon("a") is None  # already ended: nothing to tell
    assert calls.expired(11.0) == []  # its deadline went with it


def test_losing_the_link_or_one_peer() -> None:
    calls = table()
    for key, agent in (("1", "alpha"), ("2", "beta"), ("3", "alpha")):
        calls.start(key, agent, now=0.0, timeout=10.0)
    assert sorted(call.key for call in calls.lose(lambda call: call.info == "alpha")) == ["1", "3"]
    assert [call.key for call in calls.lose()] == ["2"]
    assert len(calls) == 0 and calls.next_deadline() is None and calls.expired(20.0) == []


def test_ended_calls_do_not_accumulate_deadlines() -> None:
    calls = table()
    for number in range(5_000):
        calls.start(str(number), None, now=0.0, timeout=10.0)
        calls.finish(str(number))
    assert len(calls._deadlines) < 1_000
    calls.start("last", None, now=0.0, timeout=10.0)
    assert calls.next_deadline() == 10.0
