"""HELD in the pure decision table: held steps, successors waiting, approve, deny, resend."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import yaml

from nexus.core.decide.log import resolution_entries
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.process_compile import compile_definition
from nexus.core.process_model import ProcessCatalog, Verdict
from nexus.core.sequencing import resolve
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog
from nexus_wire.codes import Decision
from tests.factories import abort, step_json

O, P = "order-a", "plan-a"  # noqa: E741
LIMITS = {"max_order_amount": Decimal(100000)}
DENIED = Verdict(ErrorCode.APPROVAL_DENIED, "denied by alice")


def approval_yaml(
    when: str | None = "data.amount > 100000", expires_s: float | None = None, name: str = "approved"
) -> str:
    """The order process as `approved`: payments above 1000.00 (CEL sees minor units) wait for a person."""
    order = builtin_catalog().get("order")
    assert order is not None
    raw = json.loads(order.definition.model_dump_json(by_alias=True, exclude_none=True))
    raw["name"] = name
    raw["steps"]["PaymentProcessed"]["approval"] = {
        k: v for k, v in {"when": when, "expires_s": expires_s}.items() if v is not None
    }
    return str(yaml.safe_dump(raw))


CATALOG = ProcessCatalog.of([compile_definition(approval_yaml())])


def big_step(seq: int, amount: int = 5000, **extra: Any) -> EventEnvelope:
    """A step of an order of `amount` USD (one item), in the `approved` process."""
    body = step_json(O, P, seq, process="approved", **extra)
    if seq == 1:
        body["data"].update(items=[{"product_id": "p", "quantity": 1, "unit_price": amount}], total_amount=amount)
    if seq == 3:
        body["data"]["amount"] = amount
    return EventEnvelope.model_validate(body)


def run(state: OrderState, *events: EventEnvelope, pending: dict[int, EventEnvelope] | None = None, **kw: Any):  # type: ignore[no-untyped-def]
    return resolve(state, list(events), pending or {}, catalog=CATALOG, limits=LIMITS, **kw)


def at_payment(amount: int = 5000) -> OrderState:
    return run(OrderState(O), big_step(1, amount), big_step(2, amount)).after


def test_a_step_needing_approval_is_held_and_changes_nothing() -> None:
    """A payment above the threshold is HELD: no application, no notification; the order names it held."""
    before = at_payment()
    payment = big_step(3)
    res = run(before, payment)
    assert [d for _, d, _ in res.decisions] == [Decision.HELD]
    assert res.applied == () and res.after.last_seq == 2 and res.after.status == "inventory_validated"
    assert res.after.held == payment.event_id and [e.event_id for e, _ in res.held] == [payment.event_id]
    assert [e.decision for e in resolution_entries(res, {})] == ["HELD"]


def test_below_the_threshold_applies_without_approval() -> None:
    """The condition decides: a small payment applies at once."""
    res = run(at_payment(50), big_step(3, 50))
    assert [d for _, d, _ in res.decisions] == [Decision.APPLY]


def test_successors_wait_and_the_held_seq_is_taken() -> None:
    """While held, successors BUFFER, another step at the held seq is DUPLICATE, a resend is HELD again."""
    payment = big_step(3)
    held = run(at_payment(), payment).after
    other = big_step(3)
    res = run(held, big_step(4), other, payment)
    assert [d for _, d, _ in res.decisions] == [Decision.BUFFER, Decision.DUPLICATE, Decision.HELD]
    assert res.held == () and res.after.buffered == frozenset({4})


def test_approval_applies_in_order_and_drains_successors() -> None:
    """Approved, the held step applies and its buffered successors drain after it, in order."""
    payment = big_step(3)
    held = run(at_payment(), payment).after
    buffered = run(held, big_step(4), big_step(5))
    pending = {e.seq_id: e for e in buffered.buffered}
    res = run(buffered.after, payment, pending=pending, approvals={payment.event_id: None})  # type: ignore[misc]
    assert [d for _, d, _ in res.decisions] == [Decision.APPLY]
    assert [a.event.seq_id for a in res.applied] == [3, 4, 5]
    assert res.after.status == "completed" and res.after.held is None
    assert payment.event_id in res.released


def test_denial_is_rejected_and_the_order_waits_for_a_correction() -> None:
    """Denied, the step is REJECTED APPROVAL_DENIED; successors keep waiting; a corrected step may follow."""
    payment = big_step(3)
    held = run(at_payment(), payment).after
    res = run(held, payment, approvals={payment.event_id: DENIED})
    assert [d for _, d, _ in res.decisions] == [Decision.REJECTED]
    assert res.rejections[0].verdict.code is ErrorCode.APPROVAL_DENIED
    assert res.after.held is None and res.after.last_seq == 2
    entries = resolution_entries(res, {}, actor="alice")
    assert [(e.decision, e.code, e.actor) for e in entries] == [("REJECTED", "APPROVAL_DENIED", "alice")]


def test_an_abort_drops_the_held_step() -> None:
    """ABORT_PLAN while a step is held: the order aborts and the held step is released (its approval void)."""
    payment = big_step(3)
    held = run(at_payment(), payment).after
    res = run(held, abort(O, P))
    assert res.after.status == "aborted" and res.after.held is None
    assert res.released == (payment.event_id,)


def test_a_drained_successor_needing_approval_is_held() -> None:
    """A held-worthy step that comes out of the buffer is held there, and the drain stops."""
    state = run(OrderState(O), big_step(1)).after
    ahead = run(state, big_step(3), big_step(4))
    pending = {e.seq_id: e for e in ahead.buffered}
    res = run(ahead.after, big_step(2), pending=pending)  # type: ignore[arg-type]
    assert [a.event.seq_id for a in res.applied] == [2]
    assert [(e.seq_id, drained) for e, drained in res.held] == [(3, True)]
    assert res.after.buffered == frozenset({4})
    assert [(e.seq, e.decision) for e in resolution_entries(res, pending)] == [(2, "APPLY"), (3, "HELD")]  # type: ignore[arg-type]


def test_only_an_approver_of_the_same_tenant_may_answer() -> None:
    """The rule behind /v1/approvals: the approver role (an operator's is not enough) and the approval's
    tenant (or every tenant)."""
    import pytest

    from nexus.auth.roles import Role
    from nexus.lifecycle.approvals import Approver, ApproverRefused, can_answer

    assert can_answer(Approver("alice", "acme"), "acme")
    assert not can_answer(Approver("alice", "acme"), "globex")  # answered 404, as if it did not exist
    assert can_answer(Approver("ops-approver", None), "globex")
    for roles in ({Role.AGENT}, {Role.OPERATOR}, {Role.ADMIN}):
        with pytest.raises(ApproverRefused):
            can_answer(Approver("bot", "acme", frozenset(roles)), "acme")


def test_an_approval_condition_reads_only_the_fields_it_names() -> None:
    """`needs_approval` converts only the fields its condition reads (as the checks do): a payment above
    1000.00 is held and one below is not, whatever else its data carries (strings and lists included),
    and a condition naming a whole variable still sees all of it."""
    from nexus.core.process_checks import needs_approval
    from nexus.processes import builtin_catalog

    process = builtin_catalog().get("order_reviewed")
    assert process is not None
    facts = {"currency": "USD", "total_amount": 200000, "items": [{"product_id": "p", "quantity": 1}]}
    noise = {"payment_id": "pay", "method": "card", "notes": ["a", "b"], "currency": "USD"}
    for extra in ({}, noise):
        assert needs_approval(process, facts, "PaymentProcessed", 3, {"amount": "2000.00", **extra}, {})
        assert not needs_approval(process, facts, "PaymentProcessed", 3, {"amount": "999.99", **extra}, {})
