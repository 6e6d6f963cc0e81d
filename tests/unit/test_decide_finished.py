"""When an order is finished, decided by the batch's fold (core/decide/finished.py): each order row of a `BatchPlan`
carries it, exactly for the orders whose new state is terminal in their process, tombstoned or aborted, and an
order finished before its batch is never unfinished by it."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.decide.finished import is_finished
from nexus.core.decide.items import Incoming, IngressKind
from nexus.core.decide.plan import BatchPlan, BatchReads, Parts, plan_batch
from nexus.core.decide.validation import NoChecks, StepChecks
from nexus.core.order_state import OrderState
from nexus.processes import builtin_catalog
from tests.factories import STEPS, abort_json, plan_json, step_json

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
CATALOG = builtin_catalog()
ORDER_VERSION = 2
TERMINAL = {"completed", "aborted"}  # processes/order.yaml's terminal states
STATUSES = [None, "created", "inventory_validated", "payment_processed", "shipped", "completed", "aborted"]


def fold(events: list[dict[str, Any]], reads: BatchReads | None = None, *, checked: bool = True) -> BatchPlan:
    """The batch of `events` planned as the gateway plans it (steps judged unless not `checked`)."""
    limits = {"max_order_amount": 100000}
    parts = Parts(catalog=CATALOG, checks=StepChecks() if checked else NoChecks(), default_limits=limits)
    items = [Incoming.parse(json.dumps(e)) for e in events]
    return plan_batch(items, reads or BatchReads(), parts, kind=IngressKind.HTTP, now=NOW)


def finished_rows(plan: BatchPlan) -> dict[str, bool]:
    return {row.order_id: row.finished for row in plan.orders}


def test_the_plan_marks_finished_the_completed_aborted_and_tombstoned_orders_only() -> None:
    """In one batch: an order completed, one aborted after its first step, one aborted before any (a tombstone)
    are finished; one created and one shipped are not."""
    events = [
        *plan_json("done", "p-done", 5),
        step_json("aborted", "p-aborted", 1),
        abort_json("aborted", "p-aborted", 1),
        abort_json("tomb", "p-tomb", 0),
        step_json("live", "p-live", 1),
        *plan_json("shipped", "p-shipped", 4),
    ]
    assert finished_rows(fold(events)) == {
        "done": True, "aborted": True, "tomb": True, "live": False, "shipped": False,
    }  # fmt: skip


def test_an_order_finished_in_an_earlier_batch_stays_finished() -> None:
    """A completed order that takes a further step (steps not judged, so nothing refuses one past its terminal
    state) keeps `finished`: the fold never unfinishes an order."""
    key = ("default", "o-1")
    done = OrderState("o-1", plan_id="p-1", status="completed", last_seq=5, process="order", process_version=2)
    plan = fold([step_json("o-1", "p-1", 6, event_type="InventoryValidated")], BatchReads({key: done}), checked=False)
    [row] = plan.orders
    assert (row.status, row.finished) == ("inventory_validated", True)


def test_finished_follows_each_process_and_completed_when_the_process_is_unknown() -> None:
    """A refund is finished `paid` or `rejected` (its own terminal states), not `completed`; an order whose process
    the catalog lacks is finished only `completed` (or aborted, or tombstoned)."""

    def state(status: str, process: str, version: int = 1, tombstone: bool = False) -> OrderState:
        return OrderState("o", status=status, process=process, process_version=version, tombstone=tombstone)

    assert is_finished(state("paid", "refund"), CATALOG) and is_finished(state("rejected", "refund"), CATALOG)
    assert not is_finished(state("under_review", "refund"), CATALOG)
    assert is_finished(state("completed", "nowhere"), CATALOG) and not is_finished(state("shipped", "nowhere"), CATALOG)
    assert is_finished(state("created", "nowhere", tombstone=True), CATALOG)
    assert not is_finished(OrderState("o"), CATALOG)


starts = st.builds(
    lambda status, tombstone: (status, tombstone and status == "aborted"), st.sampled_from(STATUSES), st.booleans()
)
moves = st.lists(st.one_of(st.integers(1, len(STEPS) + 1), st.just(0)), max_size=8)


@settings(max_examples=150, deadline=None)
@given(start=starts, moves=moves, checked=st.booleans())
def test_finished_is_exactly_a_terminal_tombstoned_or_aborted_new_state_or_an_already_finished_one(
    start: tuple[str | None, bool], moves: list[int], checked: bool
) -> None:
    """For any stored state and any batch of steps and aborts (0) on one order, its row is finished exactly when
    its new state is terminal, tombstoned or aborted, or it was finished before the batch."""
    status, tombstone = start
    last_seq = 0 if status is None else max(1, STATUSES.index(status) if status != "aborted" else 2)
    pinned = {"process": "order", "process_version": ORDER_VERSION} if status else {}
    before = OrderState("o-1", plan_id="p-1", status=status, last_seq=last_seq, tombstone=tombstone, **pinned)
    events = [abort_json("o-1", "p-1", last_seq) if m == 0 else step_json("o-1", "p-1", m) for m in moves]
    reads = BatchReads({("default", "o-1"): before}) if status is not None else BatchReads()
    plan = fold(events, reads, checked=checked)
    was_finished = tombstone or status in TERMINAL
    for row in plan.orders:
        assert row.finished == (row.tombstone or row.status in TERMINAL or was_finished)
        if was_finished:
            assert row.finished
