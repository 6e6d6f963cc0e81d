"""The delivery state machine: every transition of core/delivery.py, and the SQL speaking its states; what an
attempt's outcome writes (`written`) and a removed order's delivery summary (`summarise`), decided here and written
as given by delivery.sql `finish` and retention.sql `insert_markers`."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexus.core.delivery import (
    AttemptOutcome,
    DeliveryDecision,
    DeliveryState,
    DeliverySummary,
    DeliveryWrite,
    next_step,
    outcome_of_status,
    redrive,
    summarise,
    written,
)
from nexus_wire.backoff import Jitter, RetryPolicy

POLICY = RetryPolicy(base_ms=100, max_ms=1000, max_attempts=3, jitter=Jitter.NONE)
P, OK, DEAD = DeliveryState.PENDING, DeliveryState.DELIVERED, DeliveryState.DEAD
SQL = Path(__file__).resolve().parents[2] / "src" / "nexus" / "store"
NOW = dt.datetime(2026, 12, 5, 6, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("outcome", "attempts", "expected"),
    [
        (AttemptOutcome.DELIVERED, 1, DeliveryDecision(OK, label="delivered")),
        (AttemptOutcome.DELIVERED, 3, DeliveryDecision(OK, label="delivered")),
        (AttemptOutcome.RETRYABLE, 1, DeliveryDecision(P, delay_ms=100, label="retry_scheduled")),
        (AttemptOutcome.RETRYABLE, 2, DeliveryDecision(P, delay_ms=200, label="retry_scheduled")),
        (
            AttemptOutcome.RETRYABLE,
            3,
            DeliveryDecision(DEAD, dead_reason="max_attempts: 3 attempts, last HTTP 503", label="dead_max_attempts"),
        ),
        (AttemptOutcome.REJECTED, 1, DeliveryDecision(DEAD, dead_reason="rejected: HTTP 503", label="dead_rejected")),
        (AttemptOutcome.RELEASED, 1, DeliveryDecision(P, counted=False, label="released")),
        (AttemptOutcome.RELEASED, 3, DeliveryDecision(P, counted=False, label="released")),
    ],
)
def test_transition_table(outcome: AttemptOutcome, attempts: int, expected: DeliveryDecision) -> None:
    """Each (outcome, attempts) of a pending delivery leads where the docstring's drawing says."""
    assert next_step(P, outcome, attempts, POLICY, rand=0.5, error="HTTP 503") == expected


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    """A subscriber's Retry-After lengthens the wait, never beyond the policy's cap."""
    slow = next_step(P, AttemptOutcome.RETRYABLE, 1, POLICY, rand=0.0, retry_after_ms=700)
    capped = next_step(P, AttemptOutcome.RETRYABLE, 1, POLICY, rand=0.0, retry_after_ms=60_000)
    assert (slow.delay_ms, capped.delay_ms) == (700, 1000)


@given(
    outcome=st.sampled_from(list(AttemptOutcome)),
    attempts=st.integers(1, 50),
    rand=st.floats(0, 1),
    max_attempts=st.integers(1, 20),
)
def test_invariants_of_every_step(outcome: AttemptOutcome, attempts: int, rand: float, max_attempts: int) -> None:
    """Whatever happens: dead always has a reason, only a pending delivery waits, only a release is
    uncounted, and a retryable failure dies exactly when its attempts are used up."""
    policy = RetryPolicy(base_ms=10, max_ms=10_000, max_attempts=max_attempts)
    d = next_step(P, outcome, attempts, policy, rand=rand, error="e")
    assert (d.state is DEAD) == (d.dead_reason is not None)
    assert d.delay_ms is None or (d.state is P and 0 <= d.delay_ms <= 10_000)
    assert d.counted == (outcome is not AttemptOutcome.RELEASED)
    assert d.leaves_pending == (d.state is not P)
    if outcome is AttemptOutcome.RETRYABLE:
        assert (d.state is DEAD) == (attempts >= max_attempts)


@pytest.mark.parametrize("state", [OK, DEAD])
def test_only_pending_deliveries_are_attempted(state: DeliveryState) -> None:
    """Asking for the next step of a settled delivery is a bug, refused."""
    with pytest.raises(ValueError, match="only a pending delivery"):
        next_step(state, AttemptOutcome.DELIVERED, 1, POLICY, rand=0.0)


def test_only_dead_deliveries_are_redriven() -> None:
    """Redrive takes DEAD back to PENDING and refuses any other state."""
    assert redrive(DEAD) is P
    for state in (P, OK):
        with pytest.raises(ValueError, match="only a dead delivery"):
            redrive(state)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, AttemptOutcome.DELIVERED),
        (204, AttemptOutcome.DELIVERED),
        (500, AttemptOutcome.RETRYABLE),
        (503, AttemptOutcome.RETRYABLE),
        (408, AttemptOutcome.RETRYABLE),
        (429, AttemptOutcome.RETRYABLE),
        (301, AttemptOutcome.REJECTED),
        (400, AttemptOutcome.REJECTED),
        (410, AttemptOutcome.REJECTED),
    ],
)
def test_status_classification(status: int, outcome: AttemptOutcome) -> None:
    """2xx delivers, 5xx/408/429 are retried, any other status is a rejection."""
    assert outcome_of_status(status) is outcome


def test_sql_speaks_only_the_enum_states() -> None:
    """Every delivery state written literally in the SQL (kept for partial indexes) is a DeliveryState
    value, and the states CHECK constraint is exactly the enum."""
    values = {s.value for s in DeliveryState}
    text = (SQL / "queries" / "delivery.sql").read_text() + (SQL / "migrations" / "0002_delivery.sql").read_text()
    literals = set(re.findall(r"state\s*(?:=|<>)\s*'(\w+)'", text))
    literals |= set(re.findall(r"FILTER \(WHERE d\.state = '(\w+)'\)", text))
    assert literals <= values | {"closed"}  # 'closed' is a breaker state (circuit_breakers.state)
    check = re.search(r"CHECK \(state IN \(([^)]*)\)\)", text)
    assert check is not None
    assert set(re.findall(r"'(\w+)'", check.group(1))) == values
    finish = text.split("-- name: finish")[1].split("-- name:")[0]
    assert not re.search(r"'(pending|delivered|dead|released|retry)'", finish)


def _written(outcome: AttemptOutcome, attempt: int, status: int | None, error: str | None) -> DeliveryWrite:
    decision = next_step(P, outcome, attempt, POLICY, rand=0.5, error=error)
    return written(
        decision, attempt=attempt, status=status, error=error, last_status=503, last_error="HTTP 503", now=NOW
    )


def test_a_delivered_attempt_keeps_its_answer_and_is_stamped_delivered() -> None:
    """2xx: delivered, the attempt counted with its answer, `delivered_at` now, no longer its order's head."""
    assert _written(AttemptOutcome.DELIVERED, 2, 200, None) == DeliveryWrite(
        state=OK, read_attempts=2, attempts=2, delay_ms=None, last_status=200, last_error=None,
        delivered_at=NOW, dead_at=None, dead_reason=None, head=False,
    )  # fmt: skip


def test_a_retried_attempt_keeps_its_answer_and_stays_the_head() -> None:
    """5xx before the last attempt: pending after the backoff, the answer kept, both stamps kept, still head."""
    assert _written(AttemptOutcome.RETRYABLE, 1, 500, "HTTP 500") == DeliveryWrite(
        state=P, read_attempts=1, attempts=1, delay_ms=100, last_status=500, last_error="HTTP 500",
        delivered_at=None, dead_at=None, dead_reason=None, head=True,
    )  # fmt: skip


def test_the_last_failed_attempt_is_stamped_dead_with_its_reason() -> None:
    """5xx at the last attempt: dead now with the max_attempts reason, no longer head."""
    assert _written(AttemptOutcome.RETRYABLE, 3, None, "timeout") == DeliveryWrite(
        state=DEAD, read_attempts=3, attempts=3, delay_ms=None, last_status=None, last_error="timeout",
        delivered_at=None, dead_at=NOW, dead_reason="max_attempts: 3 attempts, last timeout", head=False,
    )  # fmt: skip


def test_a_released_attempt_gives_its_attempt_back_and_keeps_the_last_answer() -> None:
    """Cancelled by our shutdown: pending, one attempt fewer, the previous answer and schedule kept."""
    assert _written(AttemptOutcome.RELEASED, 2, None, "cancelled") == DeliveryWrite(
        state=P, read_attempts=2, attempts=1, delay_ms=None, last_status=503, last_error="HTTP 503",
        delivered_at=None, dead_at=None, dead_reason=None, head=True,
    )  # fmt: skip


@given(
    outcome=st.sampled_from(list(AttemptOutcome)),
    attempt=st.integers(0, 20),
    status=st.none() | st.integers(100, 599),
)
def test_every_write_follows_its_decision(outcome: AttemptOutcome, attempt: int, status: int | None) -> None:
    """Whatever the outcome: attempts never negative nor above the claim's, exactly the state reached is
    stamped, a dead row has its reason, and only a pending row may stay head."""
    w = _written(outcome, max(attempt, 1), status, "e")
    assert 0 <= w.attempts <= w.read_attempts
    assert (w.delivered_at is not None) == (w.state is OK)
    assert (w.dead_at is not None) == (w.state is DEAD) == (w.dead_reason is not None)
    assert w.head == (w.state is P)
    assert (w.attempts < w.read_attempts) == (outcome is AttemptOutcome.RELEASED)


@pytest.mark.parametrize(
    ("delivered", "dead", "pending", "summary"),
    [
        (0, 0, 0, DeliverySummary.NONE),
        (3, 0, 0, DeliverySummary.DELIVERED),
        (3, 1, 0, DeliverySummary.DEAD),
        (0, 2, 0, DeliverySummary.DEAD),
        (3, 1, 1, DeliverySummary.OPEN),
        (0, 0, 1, DeliverySummary.OPEN),
    ],
)
def test_a_removed_orders_deliveries_summary(delivered: int, dead: int, pending: int, summary: DeliverySummary) -> None:
    """Open while one is pending, else dead if one died, else delivered if one was, else none."""
    assert summarise(delivered=delivered, dead=dead, pending=pending) is summary


@pytest.mark.parametrize(("file", "name"), [("delivery.sql", "finish"), ("retention.sql", "insert_markers")])
def test_the_writes_decide_nothing(file: str, name: str) -> None:
    """`finish` and `insert_markers` write the values they are given: no CASE and no state literal in them."""
    text = (SQL / "queries" / file).read_text().split(f"-- name: {name}\n")[1].split("-- name:")[0]
    code = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    assert not re.search(r"\bCASE\b", code, re.IGNORECASE)
    assert not re.search(r"'(pending|delivered|dead|open|none)'", code)
