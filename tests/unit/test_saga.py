"""The saga and step state machines (core/saga.py): transitions, reverse compensation, keys, bodies."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nexus.core.saga import (
    Action,
    Attempt,
    CallDecision,
    CallMark,
    CallOutcome,
    EffectBodyError,
    Position,
    RetryRules,
    SagaStatus,
    StepStatus,
    StepView,
    Work,
    after_compensation,
    after_forward,
    build_body,
    call_mark,
    idempotency_key,
    next_work,
    on_abort,
    outcome_of_status,
    past_pivot,
    position_of,
    redrive,
    settle,
)
from nexus_wire.backoff import RetryPolicy

POLICY = RetryPolicy(base_ms=10, max_ms=100, max_attempts=3)
RULES = RetryRules(POLICY, budget_s=60.0)
BEFORE, PIVOT, AFTER = Position.BEFORE_PIVOT, Position.PIVOT, Position.AFTER_PIVOT


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
    decision = after_forward(steps[1], Attempt(1, CallOutcome.REFUSED), BEFORE, RULES, rand=0.5)
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
    first = after_forward(step, Attempt(1, CallOutcome.UNKNOWN), BEFORE, RULES, rand=0.0)
    assert first.step is StepStatus.RUNNING and first.delay_ms is not None and first.uncertain
    last = after_forward(step, Attempt(3, CallOutcome.UNKNOWN), BEFORE, RULES, rand=0.0)
    assert (last.step, last.saga, last.uncertain) == (StepStatus.FAILED, SagaStatus.COMPENSATING, True)
    given_up = [StepView(2, "InventoryValidated", StepStatus.FAILED, True, uncertain=True)]
    assert next_work(SagaStatus.COMPENSATING, given_up) == Work(Action.COMPENSATE, 2)


def test_after_the_pivot_only_a_refusal_or_the_budget_escalates_and_aborts_change_nothing() -> None:
    """Past the pivot a transient failure is retried beyond the attempt count while the budget lasts; a
    refusal or the budget's end escalates; a redrive runs it again; an abort leaves the saga as it is."""
    steps = _fulfilment([StepStatus.COMPLETED, StepStatus.COMPLETED, StepStatus.COMPLETED, StepStatus.RUNNING])
    assert past_pivot(steps) and position_of(steps[3], steps) is AFTER
    many = after_forward(steps[3], Attempt(40, CallOutcome.RETRYABLE, elapsed_s=59.0), AFTER, RULES, rand=0.5)
    assert (many.step, many.saga, many.delay_ms) == (StepStatus.RUNNING, SagaStatus.RUNNING, 75.0)
    spent = after_forward(steps[3], Attempt(41, CallOutcome.RETRYABLE, elapsed_s=60.0), AFTER, RULES, rand=0.5)
    assert (spent.step, spent.saga) == (StepStatus.FAILED, SagaStatus.ESCALATED)
    decision = after_forward(steps[3], Attempt(1, CallOutcome.REFUSED), AFTER, RULES, rand=0.5)
    assert (decision.step, decision.saga) == (StepStatus.FAILED, SagaStatus.ESCALATED)
    assert redrive(SagaStatus.ESCALATED) is SagaStatus.RUNNING
    assert on_abort(SagaStatus.RUNNING, steps) is SagaStatus.RUNNING
    with pytest.raises(ValueError, match="only an escalated or failed"):
        redrive(SagaStatus.RUNNING)


def test_abort_before_the_pivot_compensates_and_compensation_refusal_fails_the_saga() -> None:
    """An abort before the pivot compensates; a refused compensation leaves the saga FAILED (redrivable)."""
    steps = _fulfilment([StepStatus.COMPLETED, StepStatus.COMPLETED])
    assert on_abort(SagaStatus.RUNNING, steps) is SagaStatus.COMPENSATING
    assert after_compensation(Attempt(1, CallOutcome.REFUSED), RULES, rand=0.1).saga is SagaStatus.FAILED
    assert redrive(SagaStatus.FAILED) is SagaStatus.COMPENSATING
    assert after_compensation(Attempt(1, CallOutcome.SUCCEEDED), RULES, rand=0.1).step is StepStatus.COMPENSATED


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


@given(st.sampled_from(list(CallOutcome)), st.integers(1, 50), st.booleans(), st.booleans())
def test_a_step_after_the_pivot_is_never_sent_to_compensation(
    outcome: CallOutcome, attempts: int, compensable: bool, pivot: bool
) -> None:
    """Once the pivot completed, position decides, not `compensable`: a step completes, retries or
    escalates, whatever its definition's keys."""
    steps = _fulfilment([StepStatus.COMPLETED, StepStatus.COMPLETED, StepStatus.COMPLETED])
    step = StepView(5, "OrderCompleted", StepStatus.RUNNING, compensable, pivot)
    position = position_of(step, [*steps, step])
    assert position is AFTER
    decision = after_forward(step, Attempt(attempts, outcome), position, RULES, rand=0.5)
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


TRANSIENT = (CallOutcome.RETRYABLE, CallOutcome.UNKNOWN)
_calls = st.tuples(
    st.sampled_from(list(CallOutcome)),
    st.floats(0.0, 30.0),  # seconds the call took, plus any time an open breaker held it
    st.one_of(st.none(), st.floats(0.0, 1_000_000.0)),  # Retry-After, ms
)


def _walk(
    position: Position | None, calls: list[tuple[CallOutcome, float, float | None]], rands: list[float]
) -> list[tuple[Attempt, bool, CallDecision]]:
    """Feed a sequence of call outcomes to the rules as an executor would, until the step stops retrying;
    `position` None: a compensation. Each row: the attempt, whether the step was uncertain, the decision."""
    step = StepView(4, "OrderShipped", StepStatus.RUNNING, False, position is PIVOT)
    elapsed = 0.0
    seen = []
    for number, ((outcome, took, retry_after), rand) in enumerate(zip(calls, rands, strict=False), start=1):
        elapsed += took
        attempt = Attempt(number, outcome, elapsed, retry_after)
        if position is None:
            decision = after_compensation(attempt, RULES, rand=rand)
        else:
            decision = after_forward(step, attempt, position, RULES, rand=rand)
        seen.append((attempt, step.uncertain, decision))
        if decision.delay_ms is None:
            break
        step = dataclasses.replace(step, uncertain=decision.uncertain)
        elapsed += decision.delay_ms / 1000
    return seen


@given(st.sampled_from([BEFORE, PIVOT, AFTER, None]), st.lists(_calls, min_size=1, max_size=60),
       st.lists(st.floats(0.0, 1.0), min_size=60, max_size=60))  # fmt: skip
def test_outcome_sequences_follow_the_retry_table(
    position: Position | None, calls: list[tuple[CallOutcome, float, float | None]], rands: list[float]
) -> None:
    """For any sequence of outcomes at any position: every retry waits between 0 and the cap, honours
    Retry-After up to the cap; before the pivot (and at a pivot whose outcomes are all known) the count
    bounds the attempts and giving up compensates; after the pivot, at an uncertain pivot and for
    compensations, a transient failure is retried until the budget ends, and only a refusal or the
    budget's end stops it (escalated, or FAILED for a compensation); nothing after the pivot compensates."""
    seen = _walk(position, calls, rands)
    for attempt, uncertain, decision in seen:
        budgeted = position in (AFTER, None) or (
            position is PIVOT and (uncertain or attempt.outcome is CallOutcome.UNKNOWN)
        )
        if decision.delay_ms is not None:
            assert 0.0 <= decision.delay_ms <= POLICY.max_ms
            if attempt.retry_after_ms is not None:
                assert decision.delay_ms >= min(attempt.retry_after_ms, POLICY.max_ms)
            assert attempt.outcome in TRANSIENT
            assert budgeted or attempt.number < POLICY.max_attempts
            assert not budgeted or attempt.elapsed_s < RULES.budget_s
            continue
        if attempt.outcome is CallOutcome.SUCCEEDED:
            assert decision.step in (StepStatus.COMPLETED, StepStatus.COMPENSATED)
            continue
        # The step stops retrying a failure: only for a refusal, the count (unbudgeted) or the budget's end.
        assert (attempt.outcome is CallOutcome.REFUSED or (not budgeted and attempt.number >= POLICY.max_attempts)
                or (budgeted and attempt.elapsed_s >= RULES.budget_s))  # fmt: skip
        if position is None:
            assert decision.saga is SagaStatus.FAILED
        elif position is AFTER or (budgeted and attempt.outcome is not CallOutcome.REFUSED):
            assert decision.saga is SagaStatus.ESCALATED
        else:
            assert decision.saga is SagaStatus.COMPENSATING
    assert seen[-1][2].delay_ms is None or len(seen) == min(len(calls), len(rands))


@given(st.integers(1, 200), st.floats(0.0, 86_399.0), st.floats(0.0, 1.0))
def test_transient_failures_after_the_pivot_never_escalate_within_the_budget(
    attempts: int, elapsed_s: float, rand: float
) -> None:
    """With the default budget (a day), a 503 or a timeout after the pivot is retried whatever the attempt
    number, at most the cap (10 s by default) later, as long as the day since the first attempt lasts."""
    rules = RetryRules(RetryPolicy(base_ms=200, max_ms=10_000, max_attempts=5), budget_s=86_400)
    step = StepView(5, "OrderCompleted", StepStatus.RUNNING, False)
    for outcome in TRANSIENT:
        decision = after_forward(step, Attempt(attempts, outcome, elapsed_s), AFTER, rules, rand=rand)
        assert decision.delay_ms is not None and decision.delay_ms <= 10_000 and decision.saga is SagaStatus.RUNNING


def test_an_uncertain_pivot_is_settled_within_the_budget_and_a_known_one_counts() -> None:
    """At the pivot, known failures count and then compensate; once an outcome is unknown the same call is
    retried past the count, a refusal compensates and the budget's end escalates."""
    pivot = StepView(4, "OrderShipped", StepStatus.RUNNING, False, True)
    known = after_forward(pivot, Attempt(3, CallOutcome.RETRYABLE), PIVOT, RULES, rand=0.5)
    assert (known.step, known.saga) == (StepStatus.FAILED, SagaStatus.COMPENSATING)
    unknown = after_forward(pivot, Attempt(3, CallOutcome.UNKNOWN, 1.0), PIVOT, RULES, rand=0.5)
    assert (unknown.step, unknown.saga, unknown.uncertain) == (StepStatus.RUNNING, SagaStatus.RUNNING, True)
    uncertain = dataclasses.replace(pivot, uncertain=True)
    later = after_forward(uncertain, Attempt(9, CallOutcome.RETRYABLE, 30.0), PIVOT, RULES, rand=0.5)
    assert later.delay_ms is not None
    refused = after_forward(uncertain, Attempt(10, CallOutcome.REFUSED, 31.0), PIVOT, RULES, rand=0.5)
    assert (refused.step, refused.saga) == (StepStatus.FAILED, SagaStatus.COMPENSATING)
    spent = after_forward(uncertain, Attempt(11, CallOutcome.UNKNOWN, 61.0), PIVOT, RULES, rand=0.5)
    assert (spent.step, spent.saga) == (StepStatus.FAILED, SagaStatus.ESCALATED)


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    """A 429's Retry-After longer than the jittered delay is waited, but never beyond NEXUS_SAGA_RETRY_MAX_MS."""
    step = StepView(5, "OrderCompleted", StepStatus.RUNNING, False)
    short = after_forward(step, Attempt(1, CallOutcome.RETRYABLE, 0.0, 50.0), AFTER, RULES, rand=0.0)
    capped = after_forward(step, Attempt(1, CallOutcome.RETRYABLE, 0.0, 3_600_000.0), AFTER, RULES, rand=0.0)
    assert (short.delay_ms, capped.delay_ms) == (50.0, POLICY.max_ms)


@pytest.mark.parametrize("status", [StepStatus.PENDING, StepStatus.RUNNING])
def test_a_forward_calls_mark_makes_its_step_running_and_uncertain(status: StepStatus) -> None:
    """Before a forward call (first or retried), its step is RUNNING and uncertain until the outcome is written."""
    assert call_mark(Action.FORWARD, status) == CallMark(StepStatus.RUNNING, True)


@pytest.mark.parametrize("status", list(StepStatus))
def test_a_compensations_mark_keeps_the_steps_status_and_uncertainty(status: StepStatus) -> None:
    """Before a compensation, the step keeps what its forward call left (needs_compensation reads it)."""
    assert call_mark(Action.COMPENSATE, status) == CallMark(None, None)


@pytest.mark.parametrize("status", [StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.COMPENSATED])
def test_no_forward_call_is_marked_for_a_settled_step(status: StepStatus) -> None:
    """Marking a forward call of a step whose call is over is a bug, refused."""
    with pytest.raises(ValueError, match="pending or running"):
        call_mark(Action.FORWARD, status)
