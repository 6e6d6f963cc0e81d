"""The plan swap (REPLAN) in the pure decision table, row by row and under any interleaving."""

from __future__ import annotations

import itertools
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.decide.log import resolution_entries
from nexus.core.decide.replan import code_of
from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.order_state import OrderState
from nexus.core.sequencing import decide, resolve
from nexus.errors import ErrorCode, InvalidEventError
from nexus.processes import builtin_catalog, shipped
from nexus_wire.codes import Decision
from tests.factories import abort, replan, replan_json, step

ORDER = shipped("order")

O, P, Q, R = "order-r", "plan-old", "plan-new", "plan-other"  # noqa: E741
LIMITS = {"max_order_amount": Decimal(100000)}


def run(state: OrderState, *events: EventEnvelope, pending: dict[int, EventEnvelope] | None = None):  # type: ignore[no-untyped-def]
    return resolve(state, list(events), pending or {}, catalog=builtin_catalog(), limits=LIMITS)


def created(last_seq: int = 2) -> OrderState:
    res = run(OrderState(O), *(step(O, P, s) for s in range(1, last_seq + 1)))
    assert res.after.last_seq == last_seq
    return res.after


def test_replan_on_live_order_applies_keeping_status_and_seq() -> None:
    """A REPLAN on a live order APPLYs with one notification; status and last_seq stay; the plan changes."""
    before = created(2)
    res = run(before, replan(O, P, Q))
    assert [d for _, d, _ in res.decisions] == [Decision.APPLY]
    assert len(res.applied) == 1 and res.applied[0].position == before.outbox_count + 1
    after = res.after
    assert (after.plan_id, after.status, after.last_seq) == (Q, before.status, 2)
    assert after.superseded == frozenset({P})


def test_new_plan_continues_at_next_seq_and_old_stragglers_are_superseded() -> None:
    """After a REPLAN the new plan's seq 3 applies; the old plan's seq 3 is DISCARD with PLAN_SUPERSEDED."""
    state = run(created(2), replan(O, P, Q)).after
    res = run(state, step(O, P, 3), step(O, Q, 3), step(O, P, 4), step(O, R, 4))
    decisions = [d for _, d, _ in res.decisions]
    assert decisions == [Decision.DISCARD, Decision.APPLY, Decision.DISCARD, Decision.PLAN_MISMATCH]
    codes = [code_of(d, e, a) for e, d, a in res.decisions]
    assert codes == [ErrorCode.PLAN_SUPERSEDED, None, ErrorCode.PLAN_SUPERSEDED, ErrorCode.PLAN_MISMATCH]
    assert res.after.last_seq == 3 and res.after.plan_id == Q


def test_replan_drops_the_old_plans_buffer() -> None:
    """Buffered steps of the replaced plan leave the buffer with the REPLAN and are logged as DISCARD."""
    state = created(2)
    buffered = run(state, step(O, P, 4))
    pending = {4: buffered.buffered[0]}
    res = run(buffered.after, replan(O, P, Q), pending=pending)
    assert res.unbuffered == (4,) and res.after.buffered == frozenset()
    entries = resolution_entries(res, pending)
    assert [(e.decision, e.seq) for e in entries] == [("APPLY", None), ("DISCARD", 4)]
    assert entries[1].message == "buffered step dropped by replan"


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (OrderState(O), Decision.DISCARD),
        (OrderState(O, P, "aborted", 2, outbox_count=3), Decision.DUPLICATE),
        (OrderState(O, P, "completed", 5, outbox_count=5), Decision.DUPLICATE),
        (OrderState(O, Q, "created", 1, outbox_count=2, superseded=frozenset({P})), Decision.DUPLICATE),
        (OrderState(O, R, "created", 1, outbox_count=1), Decision.PLAN_MISMATCH),
    ],
)
def test_replan_decisions_off_a_live_order(state: OrderState, expected: Decision) -> None:
    """REPLAN before the order exists: DISCARD; on a terminal order or naming the current plan: DUPLICATE."""
    assert decide(state, replan(O, P, Q), ORDER) is expected


def test_replan_naming_the_current_plan_is_duplicate() -> None:
    """A REPLAN whose new plan is the order's current plan changes nothing."""
    assert decide(created(1), replan(O, P, P), ORDER) is Decision.DUPLICATE


def test_replan_envelope_shape() -> None:
    """REPLAN carries no seq_id and needs data.new_plan_id and data.reason."""
    assert parse_envelope(replan_json(O, P, Q)).new_plan_id == Q
    with pytest.raises(InvalidEventError):
        parse_envelope(replan_json(O, P, Q, seq_id=3))
    with pytest.raises(InvalidEventError):
        parse_envelope(replan_json(O, P, Q, data={"reason": "x"}))


# --- property: a swap at any position, stragglers of both plans shuffled, duplicated, batched ----------


@st.composite
def swaps(draw: st.DrawFn) -> tuple[list[EventEnvelope], list[int]]:
    k = draw(st.integers(min_value=0, max_value=5))  # old-plan steps sent
    old = [step(O, P, s) for s in range(1, k + 1)]
    new = [step(O, Q, s) for s in range(1, 6)]
    swap = replan(O, P, Q)
    pool = [*old, *new, swap]
    copies = [e for e in pool for _ in range(draw(st.integers(min_value=1, max_value=2)))]
    if draw(st.booleans()):
        copies.append(abort(O, P))
    order = draw(st.permutations(copies))
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=len(order)), max_size=4)))
    return list(order), cuts


@settings(max_examples=300, deadline=None)
@given(swaps())
def test_any_swap_applies_each_step_once_in_order_and_supersedes_the_old_plan(
    case: tuple[list[EventEnvelope], list[int]],
) -> None:
    """Old plan, then at most one REPLAN, then only the new plan, in seq order; old stragglers DISCARD."""
    order, cuts = case
    state = OrderState(O)
    pending: dict[int, EventEnvelope] = {}
    applied: list[EventEnvelope] = []
    swapped = False
    for lo, hi in itertools.pairwise([0, *cuts, len(order)]):
        res = resolve(state, order[lo:hi], pending, catalog=builtin_catalog(), limits=LIMITS)
        for seq in res.unbuffered:
            del pending[seq]
        for event in res.buffered:
            pending[event.seq_id] = event  # type: ignore[index]
        assert [a.position for a in res.applied] == list(range(state.outbox_count + 1, res.after.outbox_count + 1))
        for event, decision, after in res.decisions:
            if swapped and event.plan_id == P and not event.is_replan:
                assert decision is Decision.DISCARD
                assert code_of(decision, event, after) is ErrorCode.PLAN_SUPERSEDED
            if event.is_replan and decision is Decision.APPLY:
                swapped = True
            if decision is Decision.APPLY and not event.is_replan:
                assert event.plan_id == (Q if swapped else after.plan_id)
        applied.extend(a.event for a in res.applied)
        for event in res.buffered:
            assert event.plan_id == res.after.plan_id
        state = res.after
    replans = [i for i, e in enumerate(applied) if e.is_replan]
    assert len(replans) <= 1
    seqs = [e.seq_id for e in applied if e.seq_id is not None]
    assert seqs == list(range(1, len(seqs) + 1))
    assert len({e.event_id for e in applied}) == len(applied)
    if replans:
        at = replans[0]
        assert all(e.plan_id == P for e in applied[:at])
        assert all(e.plan_id == Q for e in applied[at + 1 :])
        assert state.superseded == frozenset({P})
    assert state.outbox_count == len(applied)
    if state.status in ("aborted", "completed"):
        assert not pending
