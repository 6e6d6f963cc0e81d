"""issue 13: the checker accounts for replanned plans (their new plan, the REPLAN's notification where it
applied) and stalled ones (the gateway's timeout abort), and reports a plan that ended otherwise."""

from __future__ import annotations

from typing import Any

from nexus.core.sequencing import deadline_abort_id
from nexus_lab.checker import check_order, check_outbox


def event(n: int, event_type: str, seq: int | None, honest: bool = True) -> dict[str, Any]:
    return {"n": n, "honest": honest, "event_id": f"e{n}", "event_type": event_type, "seq_id": seq}


def plan(events: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    base = {"index": 0, "order_id": "o-1", "plan_id": "p", "final_plan_id": "p", "gateway_abort": None}
    return {**base, "events": events, **extra}


def rows(*event_ids: str) -> list[dict[str, Any]]:
    return [{"event_id": e, "position": i} for i, e in enumerate(event_ids, start=1)]


def test_a_replanned_plan_ends_on_its_new_plan_with_the_replan_where_it_applied() -> None:
    """The REPLAN's notification sits between the steps around it (even when a later pair came swapped)."""
    events = [event(1, "OrderCreated", 1), event(2, "REPLAN", None), event(3, "PaymentProcessed", 3),
              event(4, "InventoryValidated", 2), event(5, "OrderCreated", 1, honest=False)]  # fmt: skip
    replanned = plan(events, final_plan_id="p-r", expected={"status": "payment_processed", "last_seq": 3,
                                                             "notifications": 4})  # fmt: skip
    row = {"status": "payment_processed", "last_seq": 3, "plan_id": "p-r", "outbox_count": 4}
    assert check_outbox(replanned, row, rows("e1", "e2", "e4", "e3"), []) == []
    assert check_outbox(replanned, row, rows("e1", "e4", "e3", "e2"), [])  # the REPLAN at the wrong place
    assert check_order(replanned, row) == []
    assert check_order(replanned, {**row, "plan_id": "p"})  # still on the old plan: reported


def test_a_stalled_plan_ends_with_the_gateways_timeout_abort() -> None:
    """A stalled plan's notifications are its steps then the deadline abort (one id per order and plan)."""
    stalled = plan([event(1, "OrderCreated", 1), event(2, "InventoryValidated", 2)], gateway_abort="timeout",
                   expected={"status": "aborted", "last_seq": 2, "notifications": 3})  # fmt: skip
    abort = str(deadline_abort_id("o-1", "p"))
    row = {"status": "aborted", "last_seq": 2, "plan_id": "p", "outbox_count": 3}
    assert check_outbox(stalled, row, rows("e1", "e2", abort), []) == []
    assert check_outbox(stalled, {**row, "outbox_count": 2}, rows("e1", "e2"), [])  # never aborted: reported
    assert check_order(stalled, {**row, "status": "inventory_validated"})
