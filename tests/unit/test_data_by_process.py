"""A step's data is judged by its order's own process (its step's `data:` schema), never by the default
process's schema of a step of the same name: through the batch fold (`plan_batch`), as every door reaches it."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from nexus.core.decide.items import Incoming, IngressKind
from nexus.core.decide.plan import BatchReads, Parts, plan_batch
from nexus.core.order_state import OrderState
from nexus.core.process_compile import compile_definition
from nexus.core.process_model import ProcessCatalog
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog
from nexus_wire.codes import Decision
from tests.factories import step_json

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
# A process of one's own whose steps are named like the shipped order's, with other data: a stablecoin.
LEDGER = """
name: ledger
version: 1
states: [opened, paid, closed]
terminal: [closed]
steps:
  OrderCreated:
    from: [null]
    to: opened
    data: {type: object, required: [wallet], properties: {wallet: {type: string, minLength: 3}}}
  PaymentProcessed:
    from: [opened]
    to: paid
    data:
      type: object
      required: [amount, currency]
      properties:
        amount: {type: integer, minimum: 1}
        currency: {type: string, enum: [usdc, eurc]}
  OrderCompleted: {from: [paid], to: closed}
"""
CATALOG = ProcessCatalog.of([*builtin_catalog().versions.values(), compile_definition(LEDGER)])


def ledger_step(seq: int, event_type: str, data: dict[str, Any], **extra: Any) -> Incoming:
    """A step of a ledger order as bytes on the wire (parsed as every door parses)."""
    body = step_json("o-1", "p-1", seq, event_type=event_type, data=data, **extra)
    return Incoming.parse(json.dumps(body))


def decide(items: list[Incoming], state: OrderState | None = None) -> Any:
    reads = BatchReads(states={("default", "o-1"): state} if state else {})
    return plan_batch(items, reads, Parts(CATALOG), kind=IngressKind.HTTP, now=NOW)


def test_a_step_named_like_a_shipped_one_is_judged_by_its_own_process() -> None:
    """`PaymentProcessed` with `currency: "usdc"` (refused by the shipped order's schema) applies on a ledger order."""
    plan = decide(
        [
            ledger_step(1, "OrderCreated", {"wallet": "0xabc"}, process="ledger"),
            ledger_step(2, "PaymentProcessed", {"amount": 5, "currency": "usdc"}),
        ]
    )
    assert [a.decision for a in plan.answers] == [Decision.APPLY, Decision.APPLY]
    assert plan.orders[0].status == "paid" and plan.orders[0].process == "ledger"
    assert plan.dead_letters == ()


def test_data_its_own_process_refuses_is_dead_lettered_with_the_path() -> None:
    """Data the ledger's schema refuses is DEAD_LETTER INVALID_EVENT naming the field, never its value, and
    its dead letter keeps the order; the order is untouched."""
    state = OrderState("o-1", plan_id="p-1", status="opened", last_seq=1, outbox_count=1, process="ledger",
                       process_version=1)  # fmt: skip
    plan = decide([ledger_step(2, "PaymentProcessed", {"amount": 5, "currency": "USD-secret"})], state)
    [answer] = plan.answers
    assert (answer.decision, answer.code) == (Decision.DEAD_LETTER, ErrorCode.INVALID_EVENT)
    assert answer.error is not None and answer.error.startswith("data.currency: ")
    assert "USD-secret" not in answer.error
    assert (answer.status, answer.last_seq, answer.seq_id) == ("opened", 1, 2)
    [dead] = plan.dead_letters
    assert (dead.order_id, dead.plan_id, dead.code) == ("o-1", "p-1", "INVALID_EVENT")
    assert plan.orders == () and plan.notifications == ()
    assert [e.decision for e in plan.log] == ["DEAD_LETTER"] and plan.log[0].order_id == "o-1"


def test_the_shipped_schema_still_judges_the_default_process() -> None:
    """An order of the default process keeps its schema: a lowercase currency is DEAD_LETTER INVALID_EVENT."""
    body = step_json("o-1", "p-1", 1)
    body["data"]["currency"] = "usd"
    plan = decide([Incoming.parse(json.dumps(body))])
    [answer] = plan.answers
    assert (answer.decision, answer.code) == (Decision.DEAD_LETTER, ErrorCode.INVALID_EVENT)
    assert answer.error == "data.currency: String should match pattern '^[A-Z]{3}$'"


def test_a_later_step_of_the_same_batch_is_judged_by_the_process_its_first_step_named() -> None:
    """In one batch, the first step names the process; the next step (naming none) is judged by it too."""
    plan = decide(
        [
            ledger_step(1, "OrderCreated", {"wallet": "0xabc"}, process="ledger"),
            ledger_step(2, "PaymentProcessed", {"amount": 0, "currency": "usdc"}),
        ]
    )
    assert [a.decision for a in plan.answers] == [Decision.APPLY, Decision.DEAD_LETTER]
    assert plan.answers[1].error == "data.amount: Input should be greater than or equal to 1"


def test_a_step_before_its_order_begins_is_judged_when_it_would_apply() -> None:
    """A step sent before its order's first step, naming no process, is not judged by the default process:
    it waits (BUFFER) and applies once the ledger order exists."""
    early = decide([ledger_step(2, "PaymentProcessed", {"amount": 5, "currency": "usdc"})])
    assert [a.decision for a in early.answers] == [Decision.BUFFER]
