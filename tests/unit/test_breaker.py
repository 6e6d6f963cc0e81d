"""The circuit breaker state machine: opens on consecutive failures, one probe after the cooldown."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from nexus.core.breaker import Breaker, BreakerConfig, BreakerState, transitions

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CFG = BreakerConfig(threshold=5, cooldown_s=30, probe_ttl_s=60)


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def _fail(b: Breaker, n: int, at: float = 0.0) -> Breaker:
    for _ in range(n):
        b = b.record(False, _at(at), CFG)
    return b


def test_opens_after_threshold_consecutive_failures() -> None:
    """Four failures keep it closed, the fifth opens it for the cooldown."""
    b = _fail(Breaker(), 4)
    assert b.state is BreakerState.CLOSED and b.failure_count == 4
    b = _fail(b, 1, at=1)
    assert b.state is BreakerState.OPEN
    assert b.open_until == _at(31)


def test_a_success_resets_the_consecutive_count() -> None:
    """Failures separated by a success never add up to the threshold."""
    b = Breaker()
    for _ in range(10):
        b = _fail(b, 4).record(True, T0, CFG)
    assert b.state is BreakerState.CLOSED and b.failure_count == 0


def test_open_breaker_offers_no_probe_before_cooldown_and_one_after() -> None:
    """No probe during the cooldown; after it exactly one instance gets the slot until it reports."""
    b = _fail(Breaker(), 5)
    assert not b.admits_all()
    assert b.take_probe(_at(29), "a", CFG) is None
    half = b.take_probe(_at(30), "a", CFG)
    assert half is not None and half.state is BreakerState.HALF_OPEN and half.probe_owner == "a"
    assert half.take_probe(_at(31), "b", CFG) is None
    assert not half.admits_all()


def test_probe_success_closes_and_failure_reopens() -> None:
    """The probe's own result decides: success closes with a clean count, failure opens a new cooldown."""
    half = _fail(Breaker(), 5).take_probe(_at(30), "a", CFG)
    assert half is not None
    assert half.record(True, _at(31), CFG, probe_owner="a") == Breaker()
    reopened = half.record(False, _at(31), CFG, probe_owner="a")
    assert reopened.state is BreakerState.OPEN and reopened.open_until == _at(61)
    assert reopened.probe_owner is None


def test_stale_results_change_nothing_while_open_or_half_open() -> None:
    """Results of requests sent before the breaker opened, or by non-probes, are ignored."""
    opened = _fail(Breaker(), 5)
    assert opened.record(True, _at(1), CFG) == opened
    assert opened.record(False, _at(1), CFG) == opened
    half = opened.take_probe(_at(30), "a", CFG)
    assert half is not None
    assert half.record(True, _at(31), CFG) == half
    assert half.record(False, _at(31), CFG, probe_owner="b") == half


def test_expired_probe_slot_can_be_taken_by_another_instance() -> None:
    """A prober that died is replaced once its slot's ttl has passed."""
    half = _fail(Breaker(), 5).take_probe(_at(30), "a", CFG)
    assert half is not None
    assert half.take_probe(_at(89), "b", CFG) is None
    taken = half.take_probe(_at(90), "b", CFG)
    assert taken is not None and taken.probe_owner == "b"


def test_released_probe_slot_is_free_again() -> None:
    """Giving the slot back unused lets the next claim take it; releasing someone else's does nothing."""
    half = _fail(Breaker(), 5).take_probe(_at(30), "a", CFG)
    assert half is not None
    assert half.release_probe("b") == half
    free = half.release_probe("a")
    assert free.state is BreakerState.HALF_OPEN and free.take_probe(_at(30), "b", CFG) is not None


def test_transitions_report_the_state_entered() -> None:
    """A change of state is one transition to the new state; staying put is none."""
    opened = _fail(Breaker(), 5)
    assert transitions(Breaker(), opened) == [BreakerState.OPEN]
    assert transitions(opened, opened) == []
    assert BreakerState.OPEN.gauge == 2 and BreakerState.HALF_OPEN.gauge == 1 and BreakerState.CLOSED.gauge == 0


@given(st.lists(st.tuples(st.sampled_from(["ok", "fail", "probe", "release"]), st.floats(0, 5)), max_size=80))
def test_any_sequence_keeps_the_invariants(steps: list[tuple[str, float]]) -> None:
    """Whatever happens: closed breakers hold fewer failures than the threshold and no probe; open ones
    have a cooldown end; only a half-open breaker has a probe owner; a closed one only opens by failing."""
    b, now = Breaker(), T0
    for action, dt_s in steps:
        now += dt.timedelta(seconds=dt_s * 10)
        before = b
        if action == "ok":
            b = b.record(True, now, CFG, probe_owner="p")
        elif action == "fail":
            b = b.record(False, now, CFG, probe_owner="p")
        elif action == "probe":
            b = b.take_probe(now, "p", CFG) or b
        else:
            b = b.release_probe("p")
        if b.state is BreakerState.CLOSED:
            assert b.failure_count < CFG.threshold and b.probe_owner is None
        if b.state is BreakerState.OPEN:
            assert b.open_until is not None and b.probe_owner is None
        if before.state is BreakerState.CLOSED and b.state is not BreakerState.CLOSED:
            assert action == "fail" and b.state is BreakerState.OPEN
        if before.state is BreakerState.OPEN and b.state is BreakerState.HALF_OPEN:
            assert action == "probe" and before.open_until is not None and now >= before.open_until
