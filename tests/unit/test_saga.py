"""The saga and step state machines (core/saga.py): transitions, reverse compensation, keys, bodies."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexus.core.backoff import RetryPolicy
from nexus.core.saga import (
    Action,
    CallOutcome,
    EffectBodyError,
    SagaStatus,
    StepStatus,
    StepView,
    Work,
    after_compensation,
    after_forward,
    build_body,
    idempotency_key,
    next_work,
    on_abort,
    outcome_of_status,
    past_pivot,
    redrive,
    settle,
)

POLICY = RetryPolicy(base_ms=10, max_ms=100, max_attempts=3)


def _fulfilment(statuses: list[StepStatus]) -> list[StepView]:
    kinds = [(2, "InventoryValidated", True, False), (3, "PaymentProcessed", True, False),
             (4, "OrderShipped", False, True), (5, "OrderCompleted", False, False)]  # fmt: skip
    return [
        StepView(seq, name, status, comp, pivot)
        for (seq, name, comp, pivot), status in zip(kinds[: len(statuses)], statuses, strict=True)
    ]


def test_statuses_are_those_of_seed_002_plus_escalated() -> None:
    """Saga and step statuses are exactly seed 002's, the saga's plus ESCALATED."""
    assert [s.value for s in SagaStatus] == [
        "PENDING", "RUNNING", "COMPLETED", "COMPENSATING", "COMPENSATED", "FAILED", "ESCALATED"]  # fmt: skip
    assert [s.value for s in StepStatus] == ["PENDING", "RUNNING", "COMPLETED", "FAILED", "COMPENSATED"]


def test_key_is_deterministic_and_depends_on_every_part() -> None:
    """The same call gets the same key every time; changing any part (or the secret) changes it."""
    parts = ("t", "o", "p", "PaymentProcessed", Action.FORWARD)
    key = idempotency_key(b"s", *parts)
    assert key == idempotency_key(b"s", *parts) and len(key) == 64
    assert key != idempotency_key(b"x", *parts)
    assert key != idempotency_key(b"s", "t", "o", "p", "PaymentProcessed", Action.COMPENSATE)
    assert key != idempotency_key(b"s", "t", "o2", "p", "PaymentProcessed", Action.FORWARD)


def test_status_codes_map_to_outcomes() -> None:
    """2xx succeeds, 5xx/408/429 are retried, any other status is a refusal."""
    assert [outcome_of_status(s) for s in (201, 503, 429, 408, 422, 409)] == [
        CallOutcome.SUCCEEDED, CallOutcome.RETRYABLE, CallOutcome.RETRYABLE, CallOutcome.RETRYABLE,
        CallOutcome.REFUSED, CallOutcome.REFUSED]  # fmt: skip


def test_refusal_before_pivot_compensates_in_reverse_order() -> None:
    """A refused charge fails its step and compensates the completed reservation; then the saga settles."""
    steps = _fulfilment([StepStatus.COMPLETED, StepStatus.RUNNING])
    decision = after_forward(steps[1], CallOutcome.REFUSED, 1, POLICY, rand=0.5)
    assert (decision.step, decision.saga, decision.delay_ms) == (StepStatus.FAILED, SagaStatus.COMPENSATING, None)
    steps = _fulfilment([StepStatus.COMPLETED, StepStatus.FAILED])
    assert next_work(SagaStatus.COMPENSATING, steps) == Work(Action.COMPENSATE, 2)
    done = _fulfilment([StepStatus.COMPENSATED, StepStatus.FAILED])
    assert next_work(SagaStatus.COMPENSATING, done) is None
    assert settle(SagaStatus.COMPENSATING, done) is SagaStatus.COMPENSATED


def test_timeouts_are_retried_with_a_delay_then_compensated_as_uncertain() -> None:
    """An unknown outcome is retried while attempts remain; given up, the step is uncertain and is
    compensated itself (its own key settles it)."""
    step = _fulfilment([StepStatus.RUNNING])[0]
    first = after_forward(step, CallOutcome.UNKNOWN, 1, POLICY, rand=0.0)
    assert first.step is StepStatus.RUNNING and first.delay_ms is not None and first.uncertain
    last = after_forward(step, CallOutcome.UNKNOWN, 3, POLICY, rand=0.0)
    assert (last.step, last.saga, last.uncertain) == (StepStatus.FAILED, SagaStatus.COMPENSATING, True)
    given_up = [StepView(2, "InventoryValidated", StepStatus.FAILED, True, uncertain=True)]
    assert next_work(SagaStatus.COMPENSATING, given_up) == Work(Action.COMPENSATE, 2)


def test_after_the_pivot_failures_escalate_and_aborts_change_nothing() -> None:
    """A retriable step that exhausts its retries escalates; a redrive runs it again; an abort past the
    pivot leaves the saga as it is."""
    steps = _fulfilment([StepStatus.COMPLETED, StepStatus.COMPLETED, StepStatus.COMPLETED, StepStatus.RUNNING])
    assert past_pivot(steps)
    decision = after_forward(steps[3], CallOutcome.RETRYABLE, 3, POLICY, rand=0.5)
    assert (decision.step, decision.saga) == (StepStatus.FAILED, SagaStatus.ESCALATED)
    assert redrive(SagaStatus.ESCALATED) is SagaStatus.RUNNING
    assert on_abort(SagaStatus.RUNNING, steps) is SagaStatus.RUNNING
    with pytest.raises(ValueError, match="only an escalated or failed"):
        redrive(SagaStatus.RUNNING)


def test_abort_before_the_pivot_compensates_and_compensation_refusal_fails_the_saga() -> None:
    """An abort before the pivot compensates; a refused compensation leaves the saga FAILED (redrivable)."""
    steps = _fulfilment([StepStatus.COMPLETED, StepStatus.COMPLETED])
    assert on_abort(SagaStatus.RUNNING, steps) is SagaStatus.COMPENSATING
    assert after_compensation(CallOutcome.REFUSED, 1, POLICY, rand=0.1).saga is SagaStatus.FAILED
    assert redrive(SagaStatus.FAILED) is SagaStatus.COMPENSATING
    assert after_compensation(CallOutcome.SUCCEEDED, 1, POLICY, rand=0.1).step is StepStatus.COMPENSATED


@given(st.lists(st.booleans(), min_size=1, max_size=8), st.data())
def test_compensations_run_in_reverse_order_each_once(compensable: list[bool], data: st.DataObject) -> None:
    """Whatever completed, compensating one step at a time visits exactly the completed compensable steps,
    from the highest seq down, each once, and settles COMPENSATED."""
    done = data.draw(st.integers(min_value=0, max_value=len(compensable)))
    steps = [
        StepView(i + 1, f"S{i}", StepStatus.COMPLETED if i < done else StepStatus.PENDING, c)
        for i, c in enumerate(compensable)
    ]
    order = []
    status = SagaStatus.COMPENSATING
    while (work := next_work(status, steps)) is not None:
        assert work.action is Action.COMPENSATE and work.seq not in order
        order.append(work.seq)
        steps = [dataclasses_replace(s, StepStatus.COMPENSATED) if s.seq == work.seq else s for s in steps]
    assert order == sorted((i + 1 for i in range(done) if compensable[i]), reverse=True)
    assert settle(status, steps) is SagaStatus.COMPENSATED


def dataclasses_replace(step: StepView, status: StepStatus) -> StepView:
    return dataclasses.replace(step, status=status)


@given(st.sampled_from(list(CallOutcome)), st.integers(1, 5), st.booleans(), st.booleans())
def test_a_committed_step_is_never_sent_to_compensation(
    outcome: CallOutcome, attempts: int, compensable: bool, pivot: bool
) -> None:
    """A step after the pivot (not compensable) never makes its saga compensate: it completes, retries
    or escalates."""
    step = StepView(5, "OrderCompleted", StepStatus.RUNNING, compensable and not pivot, pivot)
    decision = after_forward(step, outcome, attempts, POLICY, rand=0.5)
    if not step.compensable and not pivot:
        assert decision.saga in (SagaStatus.RUNNING, SagaStatus.ESCALATED)


def test_bodies_are_built_by_cel_from_data_facts_and_result() -> None:
    """Each body field is a CEL expression over data, order and result; a missing field is an error."""
    body = build_body(
        {"order_id": "order.order_id", "amount": "data.amount", "charge": "result.charge_id"},
        {"order": {"order_id": "o-1"}, "data": {"amount": 1250}, "result": {"charge_id": "c-9"}},
    )
    assert body == {"order_id": "o-1", "amount": 1250, "charge": "c-9"}
    with pytest.raises(EffectBodyError, match="body field x"):
        build_body({"x": "data.missing"}, {"data": {}})
