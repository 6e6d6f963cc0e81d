"""Since when a buffered step waits (nexus.core.decide.expiry `waiting_since`): from its arrival, or from the
end of the effect before it; never while that effect is performed. Pure."""

from __future__ import annotations

import datetime as dt
import uuid

from nexus.core.decide.expiry import BufferedStep, Expiry, expired_rows, waiting_since
from nexus.core.saga import StepStatus
from tests.factories import step

NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)
ARRIVED = NOW - dt.timedelta(hours=2)


def _buffered(
    status: StepStatus | None, executed: dt.datetime | None = None, updated: dt.datetime | None = None
) -> BufferedStep:
    envelope = step("o", "p", 3).model_dump_json()
    value = status.value if status is not None else None
    return BufferedStep("default", "o", 3, str(uuid.uuid4()), "p", envelope, ARRIVED, value, executed, updated)


def test_a_step_waits_from_its_arrival_without_an_effect_before_it() -> None:
    """No saga step before it: it waits since it arrived."""
    assert waiting_since(_buffered(None), NOW) == ARRIVED


def test_a_step_behind_an_effect_being_performed_never_expires() -> None:
    """The effect before it PENDING or RUNNING: it waits since now, so no timeout expires it."""
    for status in (StepStatus.PENDING, StepStatus.RUNNING):
        waiting = _buffered(status, updated=ARRIVED)
        assert waiting_since(waiting, NOW) == NOW
        assert expired_rows(Expiry((waiting,), 60), NOW)[0] == []


def test_a_step_behind_an_ended_effect_waits_from_its_end() -> None:
    """The effect ended after the step arrived: it waits from the effect's execution (else its last change);
    ended before the step arrived: from its arrival."""
    ended = NOW - dt.timedelta(minutes=10)
    assert waiting_since(_buffered(StepStatus.COMPLETED, executed=ended, updated=NOW), NOW) == ended
    assert waiting_since(_buffered(StepStatus.FAILED, updated=ended), NOW) == ended
    early = ARRIVED - dt.timedelta(hours=1)
    assert waiting_since(_buffered(StepStatus.COMPENSATED, executed=early, updated=early), NOW) == ARRIVED
    behind = _buffered(StepStatus.COMPLETED, executed=ended)
    assert expired_rows(Expiry((behind,), 3600), NOW)[0] == []
    assert [d.seq_id for d in expired_rows(Expiry((behind,), 300), NOW)[0]] == [3]
