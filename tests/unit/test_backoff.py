"""Retry schedules: exponential, capped, jittered, Retry-After honoured up to the cap."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexus_wire.backoff import Backoff, Jitter, RetryPolicy, decide, exponential_ms, jittered_ms, parse_retry_after

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_exponential_doubles_from_base_and_stops_at_cap() -> None:
    """Delays go base, 2*base, 4*base ... and never exceed max_ms."""
    policy = RetryPolicy(base_ms=100, max_ms=1000, jitter=Jitter.NONE)
    assert [exponential_ms(policy, a) for a in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]
    assert exponential_ms(policy, 500) == 1000


@given(
    attempt=st.integers(1, 200),
    rand=st.floats(0, 1),
    base=st.floats(0, 10_000),
    cap=st.floats(0, 1_000_000),
    jitter=st.sampled_from(list(Jitter)),
)
def test_jittered_delay_stays_within_its_band(
    attempt: int, rand: float, base: float, cap: float, jitter: Jitter
) -> None:
    """Full jitter lies in [0, d], equal jitter in [d/2, d], none is d, where d is the capped exponential."""
    policy = RetryPolicy(base_ms=base, max_ms=cap, jitter=jitter)
    d = exponential_ms(policy, attempt)
    delay = jittered_ms(policy, attempt, rand)
    low = {Jitter.FULL: 0.0, Jitter.EQUAL: d / 2, Jitter.NONE: d}[jitter]
    assert low - 1e-9 <= delay <= d + 1e-9
    assert delay <= cap + 1e-9


def test_decide_gives_up_at_max_attempts() -> None:
    """The failure of attempt max_attempts is final; earlier failures are retried."""
    policy = RetryPolicy(base_ms=10, max_ms=100, max_attempts=10)
    assert all(decide(policy, a, 0.5).retry for a in range(1, 10))
    assert decide(policy, 10, 0.5).retry is False
    assert decide(policy, 11, 0.5).retry is False


def test_retry_after_is_a_floor_capped_at_max() -> None:
    """Retry-After lengthens a short backoff, but never past max_ms; it never shortens a longer one."""
    policy = RetryPolicy(base_ms=10, max_ms=5_000, jitter=Jitter.NONE)
    assert decide(policy, 1, 0.0, retry_after_ms=2_000).delay_ms == 2_000
    assert decide(policy, 1, 0.0, retry_after_ms=60_000).delay_ms == 5_000
    assert decide(policy, 9, 0.0, retry_after_ms=1).delay_ms == exponential_ms(policy, 9)


def test_parse_retry_after_reads_seconds_and_http_dates() -> None:
    """Both header forms are read; past dates mean now; garbage and absence mean no hint."""
    assert parse_retry_after("120", NOW) == 120_000
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:30 GMT", NOW) == 30_000
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", NOW) == 0
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after("", NOW) is None
    assert parse_retry_after(None, NOW) is None


def test_hostile_retry_after_reads_as_absent() -> None:
    """A receiver's unreadable Retry-After (non-ASCII digits, impossible dates) is no hint, never an error."""
    for hostile in (
        "\xb2",
        "\u0663",
        "1\xb2",
        "-5",
        "1e5",
        "Mon, 32 Jan 2026 00:00:00 GMT",
        "Thu, 01 Jan 99999 00:00:00 GMT",
    ):
        assert parse_retry_after(hostile, NOW) is None, hostile
    assert parse_retry_after("9" * 400, NOW) == 10.0**12


@given(st.text(max_size=40))
def test_any_retry_after_is_absent_or_a_finite_delay(text: str) -> None:
    """Whatever a receiver sends, the reading is None or a finite, non-negative delay."""
    value = parse_retry_after(text, NOW)
    assert value is None or 0 <= value < float("inf")


def test_policy_rejects_nonsense() -> None:
    """Negative delays and fewer than one attempt are configuration errors."""
    with pytest.raises(ValueError):
        RetryPolicy(base_ms=-1)
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        exponential_ms(RetryPolicy(), 0)


def test_backoff_follows_the_schedule_and_resets() -> None:
    """A retry-in-place loop's waits grow with failures in a row, stop growing at the cap, never give
    up (max_attempts is not theirs) and start over after a success."""
    backoff = Backoff(RetryPolicy(base_ms=100, max_ms=500, max_attempts=1, jitter=Jitter.NONE))
    delays = []
    for _ in range(6):
        delay, backoff = backoff.after_failure(0.5)
        delays.append(delay)
    assert delays == [100, 200, 400, 500, 500, 500]
    assert backoff.failures == 6
    assert backoff.reset().after_failure(0.5)[0] == 100


def test_constant_policy_always_waits_the_same() -> None:
    """RetryPolicy.constant waits its delay after every failure, without jitter."""
    backoff = Backoff(RetryPolicy.constant(250))
    for _ in range(5):
        delay, backoff = backoff.after_failure(0.99)
        assert delay == 250
