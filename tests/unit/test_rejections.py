"""REJECTED in the pure core: corrected steps, drained rejections, replays, max_rejections, and a property
over any interleaving of valid and invalid steps."""

from __future__ import annotations

import itertools
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.decide.log import resolution_entries
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.process_model import ProcessCatalog
from nexus.core.sequencing import resolve
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog
from nexus_wire.codes import Decision
from tests.factories import abort, step

O, P = "order-r", "plan-r"  # noqa: E741
LIMITS = {"max_order_amount": 100000}


def bad_payment(seq: int = 3) -> EventEnvelope:
    return step(O, P, seq, event_type="PaymentProcessed", data={"payment_id": "x", "amount": 99, "currency": "USD"})


def run(events: list[EventEnvelope], catalog: ProcessCatalog | None = None) -> tuple[list[Decision], OrderState]:
    state, pending, rejected, decisions = OrderState(O), {}, {}, []
    for event in events:
        res = resolve(state, [event], pending, catalog=catalog or builtin_catalog(), limits=LIMITS, rejected=rejected)
        for seq in res.unbuffered:
            pending.pop(seq)
        for e in res.buffered:
            pending[e.seq_id] = e
        for r in res.rejections:
            rejected[r.event.event_id] = r.verdict
        decisions.append(res.decisions[0][1])
        state = res.after
    return decisions, state


def test_corrected_step_after_rejection_applies() -> None:
    """A rejected payment changes nothing; the same event_id again is REJECTED; a corrected one applies."""
    wrong = bad_payment()
    decisions, state = run([step(O, P, 1), step(O, P, 2), wrong, wrong, step(O, P, 3)])
    assert decisions == [Decision.APPLY, Decision.APPLY, Decision.REJECTED, Decision.REJECTED, Decision.APPLY]
    assert state.last_seq == 3 and state.status == "payment_processed" and state.outbox_count == 3


def test_drained_step_failing_its_check_is_rejected_and_successors_wait() -> None:
    """A buffered step rejected when drained leaves the buffer; its successor stays buffered until a fix."""
    res = resolve(
        OrderState(O), [step(O, P, 1), bad_payment(3), step(O, P, 4)], {}, catalog=builtin_catalog(), limits=LIMITS
    )
    assert [d for _, d, _ in res.decisions] == [Decision.APPLY, Decision.BUFFER, Decision.BUFFER]
    res2 = resolve(
        res.after, [step(O, P, 2)], {3: bad_payment(3), 4: step(O, P, 4)}, catalog=builtin_catalog(), limits=LIMITS
    )
    assert res2.after.last_seq == 2 and res2.after.buffered == frozenset({4})
    assert [(r.verdict.check, r.drained) for r in res2.rejections] == [("payment_amount_matches_order", True)]
    assert 3 in res2.unbuffered and [a.event.seq_id for a in res2.applied] == [2]
    res3 = resolve(res2.after, [step(O, P, 3)], {4: step(O, P, 4)}, catalog=builtin_catalog(), limits=LIMITS)
    assert [a.event.seq_id for a in res3.applied] == [3, 4]


def test_after_terminal_and_after_abort() -> None:
    """A step after completion is REJECTED AFTER_TERMINAL; after an abort it stays DISCARD."""
    done = [step(O, P, s) for s in range(1, 6)]
    extra = step(O, P, 6, event_type="OrderShipped")
    decisions, _ = run([*done, extra])
    assert decisions[-1] is Decision.REJECTED
    res = resolve(
        OrderState(O, P, "completed", 5, process="order", process_version=2),
        [extra],
        {},
        catalog=builtin_catalog(),
        limits=LIMITS,
    )
    assert res.rejections[0].verdict.code is ErrorCode.AFTER_TERMINAL
    aborted = OrderState(O, P, "aborted", 2, process="order", process_version=2)
    res = resolve(aborted, [step(O, P, 3)], {}, catalog=builtin_catalog(), limits=LIMITS)
    assert res.decisions[0][1] is Decision.DISCARD


def test_max_rejections_aborts_the_plan_once() -> None:
    """Reaching a definition's max_rejections aborts the plan: policy_violation, one notification."""
    refund = builtin_catalog().latest["refund"]
    assert refund.definition.max_rejections == 3
    bad = [
        step(
            O,
            P,
            1,
            event_type="RefundRequested",
            process="refund",
            data={"amount": -1, "currency": "USD", "reason": "x"},
            event_id=uuid.uuid4(),
        )
        for _ in range(3)
    ]
    decisions, state = run(bad)
    assert decisions == [Decision.REJECTED] * 3
    assert state.status == "aborted" and state.outbox_count == 1


def test_a_rejected_step_then_the_agents_abort_in_one_batch_are_logged_as_such() -> None:
    """A step REJECTED and the agent's own ABORT_PLAN in one batch (no max_rejections reached): the decision log
    has the rejection, then the agent's abort with its actor, not a `max_rejections` abort (the walk once took the
    agent's abort for the gateway's and then failed on it, IndexError)."""
    created = resolve(OrderState(O), [step(O, P, 1), step(O, P, 2)], {}, catalog=builtin_catalog(), limits=LIMITS)
    batch = [bad_payment(), abort(O, P, 2)]
    res = resolve(created.after, batch, {}, catalog=builtin_catalog(), limits=LIMITS)
    assert [d for _, d, _ in res.decisions] == [Decision.REJECTED, Decision.APPLY]
    entries = resolution_entries(res, {}, actor="key:1")
    assert [(e.decision, e.event_type, e.actor) for e in entries] == [
        ("REJECTED", "PaymentProcessed", "key:1"),
        ("APPLY", "ABORT_PLAN", "key:1"),
    ]


# --- the property -------------------------------------------------------------------------------------

VALID = {s: step(O, P, s) for s in range(1, 6)}
INVALID_KINDS = ("wrong_amount", "wrong_currency", "skipped", "invented")


def invalid(seq: int, kind: str) -> EventEnvelope:
    if kind == "wrong_amount" and seq == 3:
        return step(O, P, 3, data={"amount": 11, "currency": "USD"})
    if kind == "wrong_currency" and seq == 3:
        return step(O, P, 3, data={"amount": 10, "currency": "EUR"})
    if kind == "invented":
        return step(O, P, seq, event_type="OrderTeleported")
    # skipped: the step two ahead of its turn (or before the order exists)
    return step(
        O,
        P,
        seq,
        event_type=["OrderShipped", "OrderCompleted", "OrderCreated", "OrderCreated", "OrderShipped"][seq - 1],
    )


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[list[EventEnvelope], list[int], set[uuid.UUID]]:
    bad = draw(st.lists(st.tuples(st.integers(1, 5), st.sampled_from(INVALID_KINDS)), max_size=6))
    events = list(VALID.values()) + [invalid(s, k) for s, k in bad]
    events += draw(st.lists(st.sampled_from(events), max_size=4))  # resends, valid or not
    order = draw(st.permutations(events))
    cuts = sorted(draw(st.lists(st.integers(0, len(order)), max_size=4)))
    return order, cuts, {e.event_id for e in VALID.values()}


@settings(max_examples=300, deadline=None)
@given(arrivals())
def test_valid_survivors_apply_in_order_and_invalid_never(
    case: tuple[list[EventEnvelope], list[int], set[uuid.UUID]],
) -> None:
    """Whatever the interleaving and batching of valid and invalid steps: the valid ones apply once, in
    seq order; an invalid one never applies; the order never passes a seq without its valid step."""
    order, cuts, valid_ids = case
    state, pending, rejected = OrderState(O), {}, {}
    applied: list[EventEnvelope] = []
    for lo, hi in itertools.pairwise([0, *cuts, len(order)]):
        res = resolve(state, order[lo:hi], pending, catalog=builtin_catalog(), limits=LIMITS, rejected=rejected)
        for seq in res.unbuffered:
            del pending[seq]
        for e in res.buffered:
            pending[e.seq_id] = e
        for r in res.rejections:
            assert r.event.event_id not in valid_ids
            rejected[r.event.event_id] = r.verdict
        applied.extend(a.event for a in res.applied)
        state = res.after
    assert all(e.event_id in valid_ids for e in applied)
    assert [e.seq_id for e in applied] == list(range(1, len(applied) + 1))
    assert len({e.event_id for e in applied}) == len(applied)
    # every valid step arrived at least once; those that could not apply wait behind a gap (or in the buffer)
    assert state.last_seq == len(applied)
