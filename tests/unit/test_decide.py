"""The deciders of core/decide, each on its own part of the decision table, and the batch fold (`plan_batch`)
that runs them: typed rows, answers in item order, the injected parts and the extension points."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.decide.approvals import approval_id_for, must_hold
from nexus.core.decide.deadlines import deadline_abort, deadline_abort_id, deadline_for, is_deadline_abort, overdue
from nexus.core.decide.effects import EffectStatus, defer_for_effect, past_pivot
from nexus.core.decide.expiry import BufferedStep, Expiry
from nexus.core.decide.items import Incoming, IngressKind
from nexus.core.decide.log import NoDecisionLog
from nexus.core.decide.order import OrderContext, resolve
from nexus.core.decide.plan import BatchReads, Parts, plan_batch
from nexus.core.decide.position import ReorderBuffer, decide
from nexus.core.decide.rejections import limit_reached, policy_abort
from nexus.core.decide.replan import code_of, decide_replan, foreign_plan
from nexus.core.decide.rows import OrderRow, OutboxRow, PendingRow
from nexus.core.decide.validation import NoChecks, after_terminal, judge
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.process_model import CompiledProcess, Verdict
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog
from nexus_wire.codes import Decision
from tests.factories import T0, abort, replan_json, step, step_json
from tests.unit.test_deadlines import timed_catalog

O, P = "o-1", "p-1"  # noqa: E741
NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
LIMITS = {"max_order_amount": 100000}


def process(name: str) -> CompiledProcess:
    found = builtin_catalog().get(name)
    assert found is not None
    return found


def refund_step(seq: int, event_type: str, data: dict[str, Any] | None = None, **extra: Any) -> EventEnvelope:
    body = step_json(O, P, 1, process="refund", event_type=event_type, seq_id=seq, data=data or {}, **extra)
    return EventEnvelope.model_validate(body)


# --- position -----------------------------------------------------------------------------------------


@given(last=st.integers(0, 20), seq=st.integers(1, 25), buffered=st.frozensets(st.integers(1, 25), max_size=5))
def test_position_table_by_seq(last: int, seq: int, buffered: frozenset[int]) -> None:
    """On a live order of the step's plan: at or below last_seq, or buffered, DUPLICATE; last_seq + 1 APPLY;
    beyond, BUFFER."""
    buffered = frozenset(b for b in buffered if b > last + 1)
    state = OrderState(O, plan_id=P, status="created", last_seq=last, buffered=buffered)
    decision = decide(state, step(O, P, seq))
    if seq <= last or seq in buffered:
        assert decision is Decision.DUPLICATE
    elif seq == last + 1:
        assert decision is Decision.APPLY
    else:
        assert decision is Decision.BUFFER


def test_position_takes_terminal_states_from_its_caller() -> None:
    """ABORT_PLAN on an order in a state the caller names terminal is a DUPLICATE, else it applies."""
    paid = OrderState(O, plan_id=P, status="paid", last_seq=3)
    assert decide(paid, abort(O, P)) is Decision.APPLY
    assert decide(paid, abort(O, P), frozenset({"paid", "aborted"})) is Decision.DUPLICATE


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 8)), max_size=30))
def test_reorder_buffer_writes_only_what_outlives_the_batch(ops: list[tuple[bool, int]]) -> None:
    """Steps put and taken within a batch are never written; steps read and taken are deleted once."""
    read = {2: step(O, P, 2), 5: step(O, P, 5)}
    buffer = ReorderBuffer.of(read)
    for put, seq in ops:
        if put and seq not in buffer.waiting and seq not in read:
            buffer.put(step(O, P, seq))
        elif not put and seq in buffer.waiting:
            buffer.take(seq)
    assert {e.seq_id for e in buffer.to_add()} == set(buffer.waiting) - set(read)
    assert set(buffer.removed) == set(read) - set(buffer.waiting)
    assert len(buffer.removed) == len(set(buffer.removed))


# --- replan -------------------------------------------------------------------------------------------


def test_replan_table() -> None:
    """REPLAN: APPLY on a live order, DUPLICATE as a resend or on a terminal order, DISCARD before start;
    a superseded plan's step is DISCARD PLAN_SUPERSEDED, another plan's PLAN_MISMATCH."""
    swap = EventEnvelope.model_validate(replan_json(O, P, "p-2"))
    live = OrderState(O, plan_id=P, status="created", last_seq=1)
    terminal = frozenset({"completed", "aborted"})
    assert decide_replan(live, swap, terminal) is Decision.APPLY
    assert decide_replan(dataclasses.replace(live, plan_id="p-2"), swap, terminal) is Decision.DUPLICATE
    assert decide_replan(dataclasses.replace(live, status="completed"), swap, terminal) is Decision.DUPLICATE
    assert decide_replan(OrderState(O), swap, terminal) is Decision.DISCARD
    swapped = OrderState(O, plan_id="p-2", status="created", last_seq=1, superseded=frozenset({P}))
    straggler = step(O, P, 2)
    assert foreign_plan(swapped, straggler) is Decision.DISCARD
    assert code_of(Decision.DISCARD, straggler, swapped) is ErrorCode.PLAN_SUPERSEDED
    assert foreign_plan(swapped, step(O, "p-9", 2)) is Decision.PLAN_MISMATCH


# --- deadlines ----------------------------------------------------------------------------------------


@functools.cache
def timed(max_s: int) -> CompiledProcess | None:
    return timed_catalog(default_s=None, max_s=max_s).get("timed")


@settings(deadline=None)  # the first example of each max_s compiles its definition (cached after)
@given(wanted_s=st.integers(1, 10_000), max_s=st.sampled_from([1, 60, 3600, 7200, 10_000]))
def test_deadline_is_clipped_to_the_process_max(wanted_s: int, max_s: int) -> None:
    """A requested deadline later than now + max_s becomes now + max_s, and says it was clipped."""
    timed_process = timed(max_s)
    event = step(O, P, 1, deadline=(NOW + dt.timedelta(seconds=wanted_s)).isoformat())
    found = deadline_for(event, timed_process, NOW, past_pivot=False)
    assert found is not None
    at, clipped = found
    assert clipped == (wanted_s > max_s)
    assert at == NOW + dt.timedelta(seconds=min(wanted_s, max_s))
    assert deadline_for(event, timed_process, NOW, past_pivot=True) is None
    assert deadline_for(event, timed_process, None, past_pivot=False) is None


def test_overdue_only_for_a_live_plan_past_its_deadline() -> None:
    """Past its deadline a live order is overdue; not when terminal, aborted or past its pivot."""
    late = OrderState(O, plan_id=P, status="created", last_seq=1, deadline_at=NOW - dt.timedelta(seconds=1))
    terminal = frozenset({"completed"})
    assert overdue(late, NOW, terminal)
    assert not overdue(late, NOW - dt.timedelta(seconds=2), terminal)
    assert not overdue(dataclasses.replace(late, status="completed"), NOW, terminal)
    assert not overdue(dataclasses.replace(late, status="aborted"), NOW, terminal)
    assert not overdue(dataclasses.replace(late, past_pivot=True), NOW, terminal)
    timeout = deadline_abort(late, "default", NOW)
    assert is_deadline_abort(timeout) and timeout.event_id == deadline_abort_id(O, P)
    assert timeout.data["abort_code"] == "timeout"


# --- effects, rejections, validation, approvals --------------------------------------------------------


def test_a_step_with_an_effect_takes_its_seq_and_keeps_the_status() -> None:
    """fulfilment's InventoryValidated applies waiting for its effect: last_seq moves, status stays, the
    effect is running; an agent's abort once the pivot completed is PAST_PIVOT."""
    state = OrderState(O, plan_id=P, status="created", last_seq=1, process="fulfilment", process_version=1)
    deferred = defer_for_effect(process("fulfilment"), state, step(O, P, 2), False, None)
    assert deferred is not None
    applied, after = deferred
    assert applied.effect and after.last_seq == 2 and after.status == "created"
    assert after.effect is not None and after.effect["status"] is EffectStatus.RUNNING
    assert defer_for_effect(process("fulfilment"), state, step(O, P, 2), False, 2) is None  # its effect is done
    committed = dataclasses.replace(state, past_pivot=True)
    verdict = past_pivot(committed, abort(O, P), Decision.APPLY)
    assert verdict is not None and verdict.code is ErrorCode.PAST_PIVOT


def test_max_rejections_and_the_policy_abort() -> None:
    """refund allows 3 rejections: the third reaches the limit; the gateway's abort has one id per plan."""
    refund = process("refund")
    assert limit_reached(refund, 2) is None and limit_reached(refund, 3) == 3
    assert limit_reached(process("order"), 50) is None
    first, again = policy_abort(step(O, P, 2), 1, 3), policy_abort(step(O, P, 3), 1, 3)
    assert first.event_id == again.event_id and first.data["abort_code"] == "policy_violation"


def test_the_policy_abort_is_the_step_s_plan_at_its_last_seq() -> None:
    """The gateway's policy abort names the rejected step's order, plan, tenant, time and correlation id, and
    aborts at the order's last applied seq."""
    rejected = step(O, P, 4).model_copy(update={"tenant_id": "acme", "correlation_id": "corr-7"})
    abort_step = policy_abort(rejected, 2, 3)
    assert (abort_step.order_id, abort_step.plan_id, abort_step.tenant_id) == (O, P, "acme")
    assert (abort_step.timestamp, abort_step.correlation_id) == (rejected.timestamp, "corr-7")
    assert abort_step.is_abort and abort_step.data["aborted_at_seq"] == 2


def test_after_terminal_and_unknown_process() -> None:
    """A later step to a paid refund is AFTER_TERMINAL (terminal states from its definition); an order of an
    unregistered process is UNKNOWN_STEP."""
    verdict = after_terminal(process("refund"), O, "paid", 3, 4)
    assert verdict is not None and verdict.code is ErrorCode.AFTER_TERMINAL
    assert after_terminal(process("refund"), O, "auto_approved", 2, 3) is None
    assert after_terminal(process("refund"), O, "paid", 3, 3) is None
    unknown = judge(None, "nosuch", None, {}, "OrderCreated", 1, {}, LIMITS)
    assert unknown is not None and unknown.code is ErrorCode.UNKNOWN_STEP


def test_approval_holds_until_answered() -> None:
    """order_reviewed holds a payment above 1000.00 unless a person answered it; approvals are per tenant."""
    reviewed = process("order_reviewed")
    facts = {"total_amount": 500000, "currency": "USD"}
    big = step(O, P, 3, data={"payment_id": "p", "amount": 5000, "currency": "USD"})
    assert must_hold(reviewed, facts, big, LIMITS, {})
    assert not must_hold(reviewed, facts, big, LIMITS, {big.event_id: None})
    assert not must_hold(process("order"), facts, big, LIMITS, {})
    assert approval_id_for(big.event_id) != approval_id_for(big.event_id, "acme")


# --- the order fold: the two terminal-state cases of a paid refund ----------------------------------


def paid_refund() -> tuple[OrderState, OrderContext]:
    ctx = OrderContext(catalog=builtin_catalog(), limits=LIMITS)
    steps = [
        refund_step(1, "RefundRequested", {"amount": 50, "currency": "EUR", "reason": "x"}),
        refund_step(2, "RefundAutoApproved"),
        refund_step(3, "RefundPaid", {"amount": 50, "currency": "EUR"}),
    ]
    resolution = resolve(OrderState(O), steps, {}, ctx)
    assert resolution.after.status == "paid"
    return resolution.after, ctx


def test_abort_of_a_paid_refund_is_a_duplicate() -> None:
    """ABORT_PLAN on a refund in its terminal state `paid` is DUPLICATE, as on a completed order."""
    state, ctx = paid_refund()
    resolution = resolve(state, [abort(O, P, 3)], {}, ctx)
    assert [d for _, d, _ in resolution.decisions] == [Decision.DUPLICATE]
    assert resolution.after == state and resolution.applied == ()


def test_late_steps_to_a_paid_refund_never_reach_max_rejections() -> None:
    """Four steps after a paid refund are all REJECTED AFTER_TERMINAL; none counts toward max_rejections,
    so nothing aborts the refund and no notification is written."""
    state, ctx = paid_refund()
    late = [refund_step(seq, "RefundAutoApproved") for seq in (4, 5, 6, 7)]
    resolution = resolve(state, late, {}, ctx)
    assert [d for _, d, _ in resolution.decisions] == [Decision.REJECTED] * 4
    assert {r.verdict.code for r in resolution.rejections} == {ErrorCode.AFTER_TERMINAL}
    assert resolution.after.status == "paid" and resolution.applied == ()


def test_prechecks_slot() -> None:
    """A precheck's verdict makes a step REJECTED before its position is looked at."""
    too_long = Verdict(ErrorCode.LIMIT_EXCEEDED, "too many items", "max_list_items")
    ctx = OrderContext(
        catalog=builtin_catalog(), limits=LIMITS, prechecks=(lambda e: too_long if e.seq_id == 2 else None,)
    )
    resolution = resolve(OrderState(O), [step(O, P, 1), step(O, P, 2)], {}, ctx)
    assert [d for _, d, _ in resolution.decisions] == [Decision.APPLY, Decision.REJECTED]
    assert resolution.rejections[0].verdict == too_long


# --- buffer expiry and the batch fold -----------------------------------------------------------------


@given(ages=st.lists(st.integers(0, 7200), min_size=1, max_size=8))
def test_expiry_dead_letters_only_steps_older_than_the_timeout(ages: list[int]) -> None:
    """Each buffered step older than the timeout is deleted and dead-lettered BUFFER_TIMEOUT, logged once."""
    steps = [
        BufferedStep("default", O, seq + 2, str(uuid.uuid4()), P, step(O, P, seq + 2).model_dump_json(),
                     NOW - dt.timedelta(seconds=age))
        for seq, age in enumerate(ages)
    ]  # fmt: skip
    expiry = Expiry(tuple(steps), 3600)
    plan = plan_batch(
        [], BatchReads(), Parts(catalog=builtin_catalog()), kind=IngressKind.BUFFER, now=NOW, expiry=expiry
    )
    old = [s for s, age in zip(steps, ages, strict=True) if age > 3600]
    assert [d.event_id for d in plan.dead_letters] == [s.event_id for s in old]
    assert {d.code for d in plan.dead_letters} <= {ErrorCode.BUFFER_TIMEOUT.value}
    assert [u.seq_id for u in plan.unbuffered] == [s.seq_id for s in old]
    assert len(plan.log) == len(old) and plan.wake == ((("default", O),) if old else ())
    silent = Parts(catalog=builtin_catalog(), log=NoDecisionLog())
    assert plan_batch([], BatchReads(), silent, kind=IngressKind.BUFFER, now=NOW, expiry=expiry).log == ()


def test_plan_batch_answers_in_item_order_with_typed_rows() -> None:
    """A batch of two orders, a parse error and another plan's step: answers in item order, named rows for
    what to write, the mismatch and the parse error dead-lettered with their item index, actors logged."""
    items = [
        Incoming.parse(step_json("o-b", "p-b", 1)),
        Incoming.parse("{not json"),
        dataclasses.replace(Incoming.parse(step_json("o-a", "p-a", 2)), actor="key:7"),
        Incoming.parse(step_json("o-a", "p-a", 1)),
        Incoming.parse(step_json("o-a", "p-other", 3)),
    ]
    parts = Parts(catalog=builtin_catalog(), default_limits=LIMITS)
    plan = plan_batch(items, BatchReads(), parts, kind=IngressKind.HTTP, now=NOW)
    assert [a.decision for a in plan.answers] == [
        Decision.APPLY, Decision.DEAD_LETTER, Decision.BUFFER, Decision.APPLY, Decision.PLAN_MISMATCH,
    ]  # fmt: skip
    assert all(isinstance(r, OrderRow) for r in plan.orders) and {r.order_id for r in plan.orders} == {"o-a", "o-b"}
    assert all(isinstance(r, OutboxRow) for r in plan.notifications) and len(plan.notifications) == 3
    assert plan.buffered == () and plan.drained == 1  # seq 2 buffered and drained within the batch
    assert plan.dead_letter_items == (4, 1)
    assert [d.code for d in plan.dead_letters] == ["PLAN_MISMATCH", "PARSE_ERROR"]
    # its BUFFER is logged with its actor; its drained APPLY with the actor of the step that drained it
    assert [(e.decision, e.actor) for e in plan.log if e.seq == 2] == [("BUFFER", "key:7"), ("APPLY", None)]
    assert plan.wake == (("default", "o-a"), ("default", "o-b")) and plan.decisions == ()


def test_injected_parts_and_ingress_kind() -> None:
    """NoChecks applies a step a process would refuse; NoDecisionLog logs nothing; a Kafka batch carries its
    decisions for the decisions topic and keeps plan mismatches out of the dead-letter table."""
    bad = Incoming.parse(step_json(O, P, 1, event_type="OrderShipped"))
    parts = Parts(catalog=builtin_catalog(), checks=NoChecks(), log=NoDecisionLog(), record_plan_mismatch=False)
    plan = plan_batch(
        [bad, Incoming.parse(step_json(O, "p-x", 2))], BatchReads(), parts, kind=IngressKind.KAFKA, now=NOW
    )
    assert [a.decision for a in plan.answers] == [Decision.APPLY, Decision.PLAN_MISMATCH]
    assert plan.log == () and plan.dead_letters == () and len(plan.decisions) == 2
    checked = plan_batch([bad], BatchReads(), Parts(catalog=builtin_catalog()), kind=IngressKind.HTTP, now=NOW)
    assert checked.answers[0].code is ErrorCode.INVALID_TRANSITION


def test_pending_rows_carry_their_trace() -> None:
    """A step buffered across batches becomes a PendingRow with its traceparent."""
    item = Incoming.parse(step_json(O, P, 3), traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01")
    plan = plan_batch([item], BatchReads(), Parts(catalog=builtin_catalog()), kind=IngressKind.HTTP, now=T0)
    [row] = plan.buffered
    assert isinstance(row, PendingRow) and row.seq_id == 3 and row.traceparent == item.traceparent


# --- Hypothesis over the remaining deciders -----------------------------------------------------------

STATUSES = st.sampled_from([None, "created", "payment_processed", "completed", "aborted", "paid"])
PLANS = st.sampled_from(["p-1", "p-2", "p-3"])


@given(status=STATUSES, plan=PLANS, new_plan=PLANS, superseded=st.frozensets(PLANS, max_size=2))
def test_replan_never_applies_to_a_finished_or_same_plan(
    status: str | None, plan: str, new_plan: str, superseded: frozenset[str]
) -> None:
    """A REPLAN applies only on a live order of its plan naming another plan; anything else changes nothing."""
    state = OrderState(O, plan_id="p-1" if status else None, status=status, last_seq=2, superseded=superseded)
    swap = EventEnvelope.model_validate(replan_json(O, plan, new_plan))
    decision = decide_replan(state, swap, frozenset({"completed", "aborted", "paid"}))
    if decision is Decision.APPLY:
        assert status in ("created", "payment_processed") and plan == state.plan_id and new_plan != plan
    if new_plan == state.plan_id:
        assert decision is Decision.DUPLICATE


@given(status=STATUSES, last=st.integers(0, 6), seq=st.integers(1, 8))
def test_after_terminal_only_past_the_last_seq_of_a_terminal_order(status: str | None, last: int, seq: int) -> None:
    """AFTER_TERMINAL exactly when the refund is in a terminal state other than aborted and seq > last_seq."""
    verdict = after_terminal(process("refund"), O, status, last, seq)
    expected = status in ("paid",) and seq > last  # refund's terminal states: paid, rejected (and aborted)
    assert (verdict is not None) == expected


@given(amount=st.integers(1, 10_000))
def test_approval_threshold_of_order_reviewed(amount: int) -> None:
    """order_reviewed holds a payment exactly when its amount is above 1000.00."""
    facts = {"total_amount": amount * 100, "currency": "USD"}
    payment = step(O, P, 3, data={"payment_id": "p", "amount": amount, "currency": "USD"})
    assert must_hold(process("order_reviewed"), facts, payment, LIMITS, {}) == (amount > 1000)


@given(seq=st.integers(2, 5), status=st.sampled_from(["created", "inventory_validated", "payment_processed"]))
def test_every_effect_step_keeps_the_status_and_takes_its_seq(seq: int, status: str) -> None:
    """For every fulfilment step with an effect, deferring keeps the status, moves last_seq, writes no
    notification (position 0) and marks the effect running."""
    state = OrderState(O, plan_id=P, status=status, last_seq=seq - 1, process="fulfilment", process_version=1)
    deferred = defer_for_effect(process("fulfilment"), state, step(O, P, seq), True, None)
    assert deferred is not None
    applied, after = deferred
    assert (applied.position, applied.drained, after.status, after.last_seq) == (0, True, status, seq)
    assert after.effect is not None and after.effect["seq"] == seq


@given(count=st.integers(0, 10))
def test_limit_reached_is_monotonic(count: int) -> None:
    """Once a count reaches refund's max_rejections every larger count does too; order has no limit."""
    reached = limit_reached(process("refund"), count)
    assert (reached is not None) == (count >= 3)
    assert limit_reached(process("order"), count) is None
