"""A plan's start decided by the fold (nexus.core.decide.plan_start, `plan_batch`'s `starts`): ORDER_EXISTS
whenever the tenant knows the order in any way, an earlier start of the same batch included. Pure."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from nexus.core.decide.items import IngressKind
from nexus.core.decide.plan import BatchReads, Parts, plan_batch
from nexus.core.decide.plan_start import OrderKnown, PlanStart, start_refusal
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog


def test_a_plan_starts_only_for_an_order_nobody_knows() -> None:
    """Every combination of order row, buffered step, started plan and removal marker: ORDER_EXISTS unless
    none is there."""
    for order, buffered, plan, removed in itertools.product((False, True), repeat=4):
        expected = ErrorCode.ORDER_EXISTS if (order or buffered or plan or removed) else None
        assert start_refusal(OrderKnown(order, buffered, plan, removed)) is expected


def test_a_removal_marker_alone_refuses_a_start() -> None:
    """An order removed after its retention period (only its marker left) cannot start again: ORDER_EXISTS."""
    assert start_refusal(OrderKnown(order=False, buffered=False, plan=False, removed=True)) is ErrorCode.ORDER_EXISTS


KNOWN = st.builds(OrderKnown, st.booleans(), st.booleans(), st.booleans(), st.booleans())


@given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=6), st.dictionaries(st.sampled_from(["a", "b"]), KNOWN))
def test_plan_batch_folds_starts_in_order_the_first_start_of_an_unknown_order_wins(
    orders: list[str], known: dict[str, OrderKnown]
) -> None:
    """`plan_batch`'s `starts`: a start is written exactly when its order is unknown and no earlier start of the
    batch began it; every other start answers ORDER_EXISTS."""
    starts = [PlanStart("t", o, f"p{i}", "order", None, None) for i, o in enumerate(orders)]
    reads = BatchReads(known={("t", o): k for o, k in known.items()})
    plan = plan_batch([], reads, Parts(builtin_catalog()), kind=IngressKind.HTTP, now=None, starts=starts)
    seen: set[str] = set()
    expected = []
    for o in orders:
        k = known.get(o)
        fresh = o not in seen and (k is None or not (k.order or k.buffered or k.plan or k.removed))
        expected.append(None if fresh else ErrorCode.ORDER_EXISTS)
        seen.add(o)
    assert list(plan.start_refusals) == expected
    assert [s for s, r in zip(starts, expected, strict=True) if r is None] == list(plan.started)
