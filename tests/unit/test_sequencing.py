"""The decisions table, row by row, and a property test over arbitrary misbehaving arrivals."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.sequencing import decide, resolve
from nexus.processes import builtin_catalog, shipped
from nexus_wire.codes import Decision
from tests.factories import abort, step

CATALOG = builtin_catalog()
LIMITS = {"max_order_amount": 100000}  # the gateway's default tenant limit
ORDER = shipped("order")

O, P = "order-1", "plan-1"  # noqa: E741 - short names keep the table-like tests readable


def live(last_seq: int, *, buffered: frozenset[int] = frozenset(), status: str | None = None) -> OrderState:
    statuses = [
        "created",
        "inventory_validated",
        "payment_processed",
        "shipped",
        "completed",
    ]
    facts: dict[str, object] = {}
    for seq in range(1, last_seq + 1):  # the facts its applied steps left, as the process records them
        applied = step(O, P, seq)
        facts = ORDER.facts_after(facts, applied.event_type, applied.data)
    status = status or statuses[last_seq - 1]
    return OrderState(O, P, status, last_seq, buffered, outbox_count=last_seq, facts=facts)


def test_next_seq_applies() -> None:
    """seq == last_seq + 1 of the same plan is APPLY, including the first step of a new order."""
    assert decide(None, step(O, P, 1), ORDER) is Decision.APPLY
    assert decide(live(2), step(O, P, 3), ORDER) is Decision.APPLY


def test_gap_buffers() -> None:
    """seq > last_seq + 1 is BUFFER, also before the order exists."""
    assert decide(None, step(O, P, 3), ORDER) is Decision.BUFFER
    assert decide(live(1), step(O, P, 4), ORDER) is Decision.BUFFER


def test_old_or_buffered_seq_is_duplicate() -> None:
    """seq <= last_seq, or a seq already buffered, is DUPLICATE."""
    assert decide(live(3), step(O, P, 2), ORDER) is Decision.DUPLICATE
    assert decide(live(3), step(O, P, 3), ORDER) is Decision.DUPLICATE
    assert decide(live(1, buffered=frozenset({4})), step(O, P, 4), ORDER) is Decision.DUPLICATE


def test_events_of_aborted_order_are_discarded() -> None:
    """Any step for an aborted order is DISCARD; a second abort is DUPLICATE."""
    aborted = live(2, status="aborted")
    assert decide(aborted, step(O, P, 3), ORDER) is Decision.DISCARD
    assert decide(aborted, step(O, P, 1), ORDER) is Decision.DISCARD
    assert decide(aborted, abort(O, P), ORDER) is Decision.DUPLICATE


def test_abort_on_live_order_applies() -> None:
    """ABORT_PLAN on a live order is APPLY: aborted, buffer dropped, one notification."""
    res = resolve(
        live(1, buffered=frozenset({3})), [abort(O, P, 1)], {3: step(O, P, 3)}, catalog=CATALOG, limits=LIMITS
    )
    assert [d for _, d, _ in res.decisions] == [Decision.APPLY]
    assert res.after.status == "aborted"
    assert res.after.last_seq == 1
    assert res.after.buffered == frozenset()
    assert res.unbuffered == (3,)
    assert [a.position for a in res.applied] == [2]


def test_abort_before_any_event_is_tombstone() -> None:
    """ABORT_PLAN before any step is TOMBSTONE; later steps of that plan are DISCARD."""
    res = resolve(OrderState(O), [abort(O, P), step(O, P, 1), step(O, P, 2)], {}, catalog=CATALOG, limits=LIMITS)
    assert [d for _, d, _ in res.decisions] == [Decision.TOMBSTONE, Decision.DISCARD, Decision.DISCARD]
    assert res.after.tombstone
    assert res.after.status == "aborted"
    assert res.applied == ()


def test_abort_on_terminal_order_is_duplicate() -> None:
    """ABORT_PLAN on a completed order is ignored as DUPLICATE."""
    assert decide(live(5), abort(O, P, 5), ORDER) is Decision.DUPLICATE


def test_other_plan_is_plan_mismatch() -> None:
    """A step of another plan for the same order is PLAN_MISMATCH, also when only buffered steps exist."""
    assert decide(live(2), step(O, "plan-2", 3), ORDER) is Decision.PLAN_MISMATCH
    assert (
        decide(OrderState(O, plan_id=P, buffered=frozenset({3})), step(O, "plan-2", 1), ORDER) is Decision.PLAN_MISMATCH
    )
    assert decide(live(2, status="aborted"), abort(O, "plan-2"), ORDER) is Decision.PLAN_MISMATCH


def test_gap_fill_drains_buffered_successors_in_order() -> None:
    """When the gap fills, consecutive buffered steps apply after it, in seq order, and leave the buffer."""
    pending = {3: step(O, P, 3), 4: step(O, P, 4)}
    res = resolve(live(1, buffered=frozenset(pending)), [step(O, P, 2)], pending, catalog=CATALOG, limits=LIMITS)
    assert [(a.event.seq_id, a.position, a.drained) for a in res.applied] == [
        (2, 2, False),
        (3, 3, True),
        (4, 4, True),
    ]
    assert res.after.last_seq == 4
    assert res.unbuffered == (3, 4)
    assert res.buffered == ()


def test_buffered_and_drained_in_one_batch_is_never_stored() -> None:
    """A step buffered and drained within one batch produces no pending_events write."""
    res = resolve(OrderState(O), [step(O, P, 2), step(O, P, 1)], {}, catalog=CATALOG, limits=LIMITS)
    assert [d for _, d, _ in res.decisions] == [Decision.BUFFER, Decision.APPLY]
    assert res.buffered == () and res.unbuffered == ()
    assert [a.event.seq_id for a in res.applied] == [1, 2]


# --- property: any interleaving ends as the surviving events applied in order, each once -------------


def _expected(arrivals: list[EventEnvelope], k: int) -> tuple[list[int], bool, str | None]:
    """An independent specification: which seqs apply, whether the abort applies, the final status."""
    first_abort = next((i for i, e in enumerate(arrivals) if e.is_abort), None)
    before = arrivals if first_abort is None else arrivals[:first_abort]
    seen = {e.seq_id for e in before if not e.is_abort}
    m = 0
    while m + 1 in seen:
        m += 1
    if first_abort is None:
        statuses = [
            None,
            "created",
            "inventory_validated",
            "payment_processed",
            "shipped",
            "completed",
        ]
        return list(range(1, m + 1)), False, statuses[m]
    if m == 5:
        return list(range(1, 6)), False, "completed"
    return list(range(1, m + 1)), m > 0, "aborted"


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[list[EventEnvelope], list[int], int]:
    k = draw(st.integers(min_value=1, max_value=5))
    events = [step(O, P, s) for s in range(1, k + 1)]
    copies = [e for e in events for _ in range(draw(st.integers(min_value=1, max_value=3)))]
    if draw(st.booleans()):
        copies.append(abort(O, P))
    order = draw(st.permutations(copies))
    cuts = sorted(draw(st.lists(st.integers(min_value=0, max_value=len(order)), max_size=4)))
    return list(order), cuts, k


@settings(max_examples=300, deadline=None)
@given(arrivals())
def test_any_interleaving_applies_survivors_once_in_order(
    case: tuple[list[EventEnvelope], list[int], int],
) -> None:
    """Duplicates, reorderings, an abort and any batching end as the surviving steps applied once, in order."""
    order, cuts, k = case
    state = OrderState(O)
    pending: dict[int, EventEnvelope] = {}
    applied: list[EventEnvelope] = []
    bounds = [0, *cuts, len(order)]
    for lo, hi in itertools.pairwise(bounds):
        res = resolve(state, order[lo:hi], pending, catalog=CATALOG, limits=LIMITS)
        for seq in res.unbuffered:
            del pending[seq]
        for event in res.buffered:
            assert event.seq_id not in pending
            pending[event.seq_id] = event  # type: ignore[index]
        applied.extend(a.event for a in res.applied)
        assert [a.position for a in res.applied] == list(range(state.outbox_count + 1, res.after.outbox_count + 1))
        state = res.after
    seqs, abort_applied, status = _expected(order, k)
    assert [e.seq_id for e in applied if not e.is_abort] == seqs
    assert sum(1 for e in applied if e.is_abort) == int(abort_applied)
    if abort_applied:
        assert applied[-1].is_abort
    assert state.status == status
    assert state.last_seq == (seqs[-1] if seqs else 0)
    assert state.outbox_count == len(applied)
    assert len({e.event_id for e in applied}) == len(applied)
    if status == "aborted" or status == "completed":
        assert not pending
