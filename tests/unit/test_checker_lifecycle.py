"""The checker accounts for replanned plans (their new plan, the REPLAN's notification where it
applied) and stalled ones (the gateway's timeout abort), held ones (approved or denied),
and reports a plan that ended otherwise."""

from __future__ import annotations

from typing import Any

from nexus.core.decide.deadlines import deadline_abort_id
from nexus_lab.checker import check_approvals, check_order, check_outbox, check_rejected


def event(n: int, event_type: str, seq: int | None, honest: bool = True) -> dict[str, Any]:
    return {"n": n, "honest": honest, "event_id": f"e{n}", "event_type": event_type, "seq_id": seq,
            "mode": None, "expected_decision": "APPLY"}  # fmt: skip


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


def held_plan(answer: str) -> dict[str, Any]:
    """An approval plan: payment HELD, successors waiting; denied, the agent's abort follows."""
    approved = answer == "approve"
    events = [event(1, "OrderCreated", 1), event(2, "InventoryValidated", 2)]
    events += [{**event(n, t, n, honest=approved), "expected_decision": d, "variant": answer}
               for n, t, d in ((3, "PaymentProcessed", "HELD"), (4, "OrderShipped", "BUFFER"),
                               (5, "OrderCompleted", "BUFFER"))]  # fmt: skip
    if not approved:
        events.append({**event(6, "ABORT_PLAN", None), "expected_decision": "APPLY", "variant": answer})
    expected = {"status": "completed", "last_seq": 5, "notifications": 5} if approved else {
        "status": "aborted", "last_seq": 2, "notifications": 3}  # fmt: skip
    decision = ("APPLY", None) if approved else ("REJECTED", "APPROVAL_DENIED")
    approval = {"approval_id": "a-1", "answer": answer, "decision": decision[0], "code": decision[1]}
    return plan(events, expected=expected, approval=approval)


def test_an_approved_plan_applies_every_step_and_its_approval_is_approved() -> None:
    """Approved: all five steps notified in order, one approval `approved`, nothing rejected."""
    approved = held_plan("approve")
    row = {"status": "completed", "last_seq": 5, "plan_id": "p", "outbox_count": 5}
    assert check_outbox(approved, row, rows("e1", "e2", "e3", "e4", "e5"), []) == []
    assert check_approvals(approved, [{"event_id": "e3", "status": "approved"}]) == []
    assert check_approvals(approved, [{"event_id": "e3", "status": "pending"}])  # never answered: reported
    assert check_rejected(approved, {}) == []
    assert check_rejected(approved, {"e3": "APPROVAL_DENIED"})


def test_a_denied_step_that_applied_anyway_is_caught() -> None:
    """Denied: the held step is REJECTED APPROVAL_DENIED and it and its successors never apply; a gateway
    that applied the denied payment (or drained the successors) fails `outbox` and `order`."""
    denied = held_plan("deny")
    row = {"status": "aborted", "last_seq": 2, "plan_id": "p", "outbox_count": 3}
    assert check_outbox(denied, row, rows("e1", "e2", "e6"), []) == []
    assert check_order(denied, row) == []
    assert check_rejected(denied, {"e3": "APPROVAL_DENIED"}) == []
    assert check_approvals(denied, [{"event_id": "e3", "status": "denied"}]) == []
    wrong = {**row, "last_seq": 3, "outbox_count": 4}
    assert check_outbox(denied, wrong, rows("e1", "e2", "e3", "e6"), [])  # the denied payment applied
    assert check_order(denied, wrong)
    assert check_outbox(denied, row, rows("e1", "e2", "e6"), [4, 5])  # successors left waiting
    assert check_rejected(denied, {})  # not recorded as denied
    assert check_approvals(denied, [{"event_id": "e3", "status": "approved"}])
    assert check_approvals(plan([event(1, "OrderCreated", 1)]), [{"event_id": "e1", "status": "pending"}])
