"""What an attempt's outcome writes (core/delivery.py `written`) and a removed order's delivery summary
(`summarise`): decided in the core, written as given by delivery.sql `finish` and retention.sql `insert_markers`."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexus.core.backoff import Jitter, RetryPolicy
from nexus.core.delivery import (
    AttemptOutcome,
    DeliveryState,
    DeliverySummary,
    DeliveryWrite,
    next_step,
    summarise,
    written,
)

POLICY = RetryPolicy(base_ms=100, max_ms=1000, max_attempts=3, jitter=Jitter.NONE)
P, OK, DEAD = DeliveryState.PENDING, DeliveryState.DELIVERED, DeliveryState.DEAD
NOW = dt.datetime(2026, 12, 5, 6, 0, tzinfo=dt.UTC)
QUERIES = Path(__file__).resolve().parents[2] / "src" / "nexus" / "store" / "queries"


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
    text = (QUERIES / file).read_text().split(f"-- name: {name}\n")[1].split("-- name:")[0]
    code = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    assert not re.search(r"\bCASE\b", code, re.IGNORECASE)
    assert not re.search(r"'(pending|delivered|dead|open|none)'", code)
