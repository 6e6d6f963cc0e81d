"""A saga call's outcome as a command of the fold (nexus.core.decide.outcomes, plan_batch's `effects`): the
saga's row after each outcome, and an effect's success applied for good by the fold. Pure."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nexus.core.decide.items import EffectOutcome, EffectResult, IngressKind
from nexus.core.decide.outcomes import (
    CompensationRow,
    OutboxCount,
    SagaAfter,
    Settled,
    compensation_notification,
    executed_at,
    is_terminal,
    redriven,
    saga_after,
    saga_row,
    settled,
    settled_retrying,
)
from nexus.core.decide.plan import BatchPlan, BatchReads, Parts, plan_batch
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.saga import SagaStatus, StepStatus, StepView
from nexus.core.sequencing import resolve
from nexus.processes import builtin_catalog
from tests.factories import step_json

CATALOG = builtin_catalog()
NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)
KEY = ("default", "o")
OPEN = (SagaStatus.PENDING, SagaStatus.RUNNING, SagaStatus.COMPENSATING)


def _step(seq: int) -> EventEnvelope:
    return EventEnvelope.model_validate(step_json("o", "p", seq, process="fulfilment"))


def _outcome(
    result: EffectResult, *, forward: bool = True, retry_s: float | None = None, **kw: object
) -> EffectOutcome:
    status = StepStatus.COMPLETED if result is EffectResult.DONE else StepStatus.FAILED
    fields: dict[str, Any] = {"step_status": status, "retry_s": retry_s, "error": "boom", **kw}
    return EffectOutcome("default", "o", 2, "InventoryValidated", "inventory", forward, result, **fields)


outcomes = st.builds(
    _outcome,
    st.sampled_from(EffectResult),
    forward=st.booleans(),
    retry_s=st.none() | st.floats(min_value=0.001, max_value=60),
    keep=st.booleans(),
)
terminals = st.none() | st.tuples(st.sampled_from(["created", "shipped", "completed", "aborted"]), st.booleans())


@given(outcomes, st.sampled_from(SagaStatus), terminals)
def test_the_saga_after_an_outcome_follows_the_table(
    outcome: EffectOutcome, current: SagaStatus, terminal: tuple[str, bool] | None
) -> None:
    """Each row of the module's table: the saga's status, next attempt and error after one outcome."""
    after = saga_after(outcome, current, terminal)
    moving = SagaStatus.RUNNING if outcome.forward and current is SagaStatus.PENDING else current
    if not outcome.forward and outcome.result is EffectResult.COMPENSATED:
        assert after == SagaAfter(current, 0.0, None)
    elif outcome.forward and outcome.result is EffectResult.DONE:
        if terminal is None:
            assert after == SagaAfter(moving, 0.0, None)
        elif terminal[1]:
            completed = SagaStatus.RUNNING if terminal[0] == "aborted" else SagaStatus.COMPLETED
            assert after == SagaAfter(completed, None, None)
        else:
            assert after == SagaAfter(SagaStatus.RUNNING, 0.0, None)
    elif outcome.retry_s is not None:
        assert after == SagaAfter(moving, outcome.retry_s, "boom")
    elif not outcome.forward:
        assert after == SagaAfter(SagaStatus.FAILED, None, "boom")
    elif outcome.result is EffectResult.ESCALATED:
        assert after == SagaAfter(SagaStatus.ESCALATED, None, "boom")
    else:
        failing = SagaStatus.FAILED if current is SagaStatus.FAILED else SagaStatus.COMPENSATING
        assert after == SagaAfter(failing, 0.0, "boom")


@given(outcomes, st.sampled_from(SagaStatus), terminals)
def test_a_saga_is_kept_when_due_at_once_and_open_and_retrying_while_retried(
    outcome: EffectOutcome, current: SagaStatus, terminal: tuple[str, bool] | None
) -> None:
    """The row keeps the saga leased only if the writer keeps it, it is due now and open; it is retrying only
    while its call is retried and the saga open."""
    after = saga_after(outcome, current, terminal)
    row = saga_row(outcome, after, None, NOW)
    assert row.keep == (outcome.keep and after.delay_s == 0 and after.status in OPEN)
    retrying = outcome.retry_s is not None and after.status in OPEN
    assert (row.status, row.delay_s) == (after.status.value, after.delay_s)
    assert (row.retrying_since, row.retrying_service) == ((NOW, "inventory") if retrying else (None, None))


def test_terminal_states_come_from_the_orders_process_only() -> None:
    """`completed` is terminal in the order process; a process the catalog lacks has no terminal state (no
    fixed fallback list)."""
    assert is_terminal(CATALOG, "order", None, "completed")
    assert not is_terminal(CATALOG, "order", None, "created")
    assert not is_terminal(CATALOG, "no-such-process", None, "completed")
    assert not is_terminal(CATALOG, "no-such-process", None, "aborted")


def _held() -> tuple[OrderState, dict[int, EventEnvelope]]:
    """An order whose step 2 waits for its effect, with step 3 buffered behind it."""
    first = resolve(OrderState("o"), [_step(1), _step(2), _step(3)], {}, catalog=CATALOG)
    return first.after, {3: first.buffered[0]}


def _fold(outcome: EffectOutcome, state: OrderState, pending: dict[int, EventEnvelope], saga: SagaStatus) -> BatchPlan:
    reads = BatchReads(states={KEY: state}, pending={KEY: pending}, sagas={KEY: saga})
    return plan_batch([], reads, Parts(CATALOG), kind=IngressKind.SAGA, now=NOW, effects=[outcome])


def test_the_fold_applies_a_success_for_good_and_drains_its_successor() -> None:
    """A DONE outcome of a RUNNING saga: the step applies (status, notification), step 3 drains into its own
    effect, the saga stays RUNNING and due now, and the order's waiters wake."""
    state, pending = _held()
    plan = _fold(_outcome(EffectResult.DONE, envelope=_step(2), error=None), state, pending, SagaStatus.RUNNING)
    assert len(plan.resolutions) == 1
    [order] = plan.orders
    assert (order.status, order.last_seq) == ("inventory_validated", 3)
    assert [n.seq_id for n in plan.notifications] == [2]
    assert [(r.status, r.delay_s, r.keep) for r in plan.sagas] == [("RUNNING", 0.0, True)]
    assert plan.wake == (KEY,)


def test_the_fold_applies_nothing_for_a_compensating_saga_or_a_stale_success() -> None:
    """A success meeting a compensating saga, or an order aborted meanwhile, writes no order row."""
    state, pending = _held()
    done = _outcome(EffectResult.DONE, envelope=_step(2), error=None)
    turned = _fold(done, state, pending, SagaStatus.COMPENSATING)
    assert (turned.orders, turned.resolutions) == ((), ())
    assert [(r.status, r.delay_s) for r in turned.sagas] == [("COMPENSATING", 0.0)]
    aborted = dataclasses.replace(state, status="aborted")
    stale = _fold(done, aborted, pending, SagaStatus.RUNNING)
    assert (stale.orders, stale.resolutions) == ((), ())
    assert [(r.status, r.delay_s) for r in stale.sagas] == [("RUNNING", None)]


def test_a_compensations_notification_has_one_id_per_step_and_no_seq() -> None:
    """The notification of a compensated step: EffectCompensated at the given position, no seq of its own,
    the same ids however often it is built."""
    outcome = _outcome(EffectResult.COMPENSATED, forward=False, response={"ok": True}, traceparent="tp")
    row = compensation_notification(outcome, 4, "p", "aborted")
    assert row == compensation_notification(outcome, 4, "p", "aborted")
    assert (row.position, row.event_type, row.seq_id, row.plan_id, row.traceparent) == (
        4, "EffectCompensated", None, "p", "tp",
    )  # fmt: skip
    assert '"compensated_seq": 2' in row.payload


def _view(seq: int, status: StepStatus, *, compensable: bool = True) -> StepView:
    return StepView(seq=seq, step=f"S{seq}", status=status, compensable=compensable, pivot=False, uncertain=False)


def test_a_saga_with_nothing_to_call_settles_as_read_under_the_lock() -> None:
    """Changed since the claim, or with work again: due at once; its compensation over: COMPENSATED with the
    plan's abort naming the failed step; waiting for the agent: not due, no abort."""
    running = [_view(1, StepStatus.COMPLETED), _view(2, StepStatus.PENDING)]
    assert settled(SagaStatus.RUNNING, SagaStatus.COMPENSATING, running) == Settled(SagaStatus.COMPENSATING, 0.0)
    assert settled(SagaStatus.RUNNING, SagaStatus.RUNNING, running) == Settled(SagaStatus.RUNNING, 0.0)
    escalated = [_view(1, StepStatus.FAILED)]
    assert settled(SagaStatus.RUNNING, SagaStatus.ESCALATED, escalated) == Settled(SagaStatus.ESCALATED, 0.0)
    over = [_view(1, StepStatus.COMPENSATED), _view(2, StepStatus.FAILED)]
    aborted = Settled(SagaStatus.COMPENSATED, None, "effect of S2 failed")
    assert settled(SagaStatus.COMPENSATING, SagaStatus.COMPENSATING, over) == aborted
    undone = [_view(1, StepStatus.COMPENSATED)]
    compensated = Settled(SagaStatus.COMPENSATED, None, "effects compensated")
    assert settled(SagaStatus.COMPENSATING, SagaStatus.COMPENSATING, undone) == compensated
    waiting = [_view(1, StepStatus.COMPLETED)]
    assert settled(SagaStatus.RUNNING, SagaStatus.RUNNING, waiting) == Settled(SagaStatus.RUNNING, None)


@given(
    st.lists(st.sampled_from(StepStatus), max_size=6), st.sampled_from([SagaStatus.RUNNING, SagaStatus.COMPENSATING])
)
def test_a_redrive_sets_failed_steps_pending_again_only_back_to_the_steps(
    statuses: list[StepStatus], target: SagaStatus
) -> None:
    """Redriven to RUNNING, each FAILED step is PENDING again and every other step keeps its status; redriven to
    COMPENSATING, every step keeps its status."""
    steps = [_view(seq, status) for seq, status in enumerate(statuses, 1)]
    redone = redriven(target, steps)
    assert [seq for seq, _ in redone] == [s.seq for s in steps]
    for (_, after), before in zip(redone, statuses, strict=True):
        moved = target is SagaStatus.RUNNING and before is StepStatus.FAILED
        assert after is (StepStatus.PENDING if moved else before)


def test_a_retrying_saga_keeps_when_it_began_retrying_and_forgets_it_once_not_retried() -> None:
    """A retried call of a saga already retrying keeps its first failure's time; a first retried failure
    starts it at the fold's clock; a call not retried (or a closed saga) clears both values."""
    earlier = NOW - dt.timedelta(minutes=5)
    retried = _outcome(EffectResult.FAILED, retry_s=2.0)
    after = saga_after(retried, SagaStatus.RUNNING, None)
    assert saga_row(retried, after, earlier, NOW).retrying_since == earlier
    assert saga_row(retried, after, None, NOW).retrying_since == NOW
    assert saga_row(retried, after, earlier, NOW).retrying_service == "inventory"
    done = _outcome(EffectResult.DONE, envelope=_step(2), error=None)
    cleared = saga_row(done, saga_after(done, SagaStatus.RUNNING, ("created", False)), earlier, NOW)
    assert (cleared.retrying_since, cleared.retrying_service) == (None, None)


def test_a_steps_execution_time_is_set_only_when_its_forward_call_completed_it() -> None:
    """`executed_at` is the fold's clock for a COMPLETED forward call, None (kept) for anything else."""
    assert executed_at(_outcome(EffectResult.DONE), NOW) == NOW
    assert executed_at(_outcome(EffectResult.FAILED), NOW) is None
    assert executed_at(_outcome(EffectResult.ESCALATED), NOW) is None


def test_a_settled_saga_keeps_its_retrying_while_due_and_clears_it_when_not_due() -> None:
    """Due again (a delay): retrying since and service kept as read; not due: both cleared."""
    assert settled_retrying(0.0, NOW, "inventory") == (NOW, "inventory")
    assert settled_retrying(None, NOW, "inventory") == (None, None)


def test_compensations_take_the_orders_next_positions_and_stamp_their_steps() -> None:
    """Two compensated steps of one order (outbox_count 3) take positions 4 and 5 and leave the count at 5,
    each step COMPENSATED at the fold's clock; an order without a row gets its step row but no notification;
    a failed compensation writes nothing here."""
    state = dataclasses.replace(_held()[0], outbox_count=3)
    first = _outcome(EffectResult.COMPENSATED, forward=False, step_status=StepStatus.COMPENSATED, response={"a": 1})
    second = dataclasses.replace(first, seq=1, step_name="OrderCreated")
    gone = dataclasses.replace(first, order_id="gone")
    failed = _outcome(EffectResult.FAILED, forward=False)
    plan = plan_batch(
        [], BatchReads(states={KEY: state}, sagas={KEY: SagaStatus.COMPENSATING}), Parts(CATALOG),
        kind=IngressKind.SAGA, now=NOW, effects=[first, second, gone, failed],
    )  # fmt: skip
    assert [(n.order_id, n.position, n.event_type) for n in plan.notifications] == [
        ("o", 4, "EffectCompensated"), ("o", 5, "EffectCompensated"),
    ]  # fmt: skip
    assert plan.outbox_counts == (OutboxCount("default", "o", 5),)
    assert plan.compensated == (
        CompensationRow("default", "o", 2, "COMPENSATED", {"a": 1}, NOW),
        CompensationRow("default", "o", 1, "COMPENSATED", {"a": 1}, NOW),
        CompensationRow("default", "gone", 2, "COMPENSATED", {"a": 1}, NOW),
    )
