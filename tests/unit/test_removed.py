"""The decision table of a removed order's steps (core/decide/removed.py), through the order fold."""

from __future__ import annotations

from nexus.core.decide.order import OrderContext, OrderFold
from nexus.core.decide.removed import decide_removed
from nexus.core.decide.replan import code_of
from nexus.core.order_state import OrderState
from nexus.errors import ErrorCode
from nexus_wire.codes import Decision
from tests.factories import abort, replan, step

COMPLETED = OrderState("o-1", plan_id="p-1", status="completed", last_seq=5, outbox_count=5, removed=True)
TOMBSTONED = OrderState("o-1", plan_id="p-1", status="aborted", tombstone=True, outbox_count=1, removed=True)


def test_a_step_at_or_below_last_seq_of_its_plan_is_a_duplicate() -> None:
    """Every seq 1..last_seq of the order's own plan is DUPLICATE, with no code."""
    for seq in range(1, 6):
        assert decide_removed(COMPLETED, step("o-1", "p-1", seq)) is Decision.DUPLICATE
    assert code_of(Decision.DUPLICATE, step("o-1", "p-1", 3), COMPLETED) is None


def test_a_later_step_another_plan_or_a_replan_is_discarded_order_removed() -> None:
    """A seq past last_seq, another plan's OrderCreated and a REPLAN are DISCARD with ORDER_REMOVED."""
    for event in (step("o-1", "p-1", 6), step("o-1", "p-2", 1), replan("o-1", "p-1", "p-3")):
        decision = decide_removed(COMPLETED, event)
        assert decision is Decision.DISCARD
        assert code_of(decision, event, COMPLETED) is ErrorCode.ORDER_REMOVED


def test_an_abort_of_its_plan_is_a_duplicate_and_a_tombstones_orders_created_is_discarded() -> None:
    """ABORT_PLAN of the removed plan is DUPLICATE; a tombstoned order (last_seq 0) cannot start: seq 1 is DISCARD."""
    assert decide_removed(TOMBSTONED, abort("o-1", "p-1")) is Decision.DUPLICATE
    assert decide_removed(TOMBSTONED, step("o-1", "p-1", 1)) is Decision.DISCARD


def test_the_fold_decides_a_removed_order_from_its_marker_alone() -> None:
    """Through OrderFold, a removed order's steps change nothing: the state after each is the marker's."""
    fold = OrderFold(COMPLETED, {}, OrderContext())
    for event in (step("o-1", "p-1", 1), step("o-1", "p-1", 6), step("o-1", "p-9", 1)):
        fold.step(event)
    result = fold.result()
    assert [d for _, d, _ in result.decisions] == [Decision.DUPLICATE, Decision.DISCARD, Decision.DISCARD]
    assert result.after == COMPLETED and not result.applied and not result.buffered
