"""A step's data is checked against its process's JSON Schema once: the arrival check (`data_verdict`) tells
the fold, so `validate_step` does not check the same envelope against the same process again; a step the
arrival check did not judge (buffered before, or waiting for its order's process) is checked when it would
apply, exactly as before."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from nexus.core import step_data
from nexus.core.decide.items import Incoming, IngressKind
from nexus.core.decide.plan import BatchPlan, BatchReads, Parts, plan_batch
from nexus.core.envelope import parse_envelope
from nexus.core.process_compile import compile_definition
from nexus.core.process_model import ProcessCatalog
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog
from nexus_wire.codes import Decision
from tests.factories import step_json

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
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
    data: {type: object, required: [amount], properties: {amount: {type: integer, minimum: 1}}}
  OrderCompleted: {from: [paid], to: closed}
"""
CATALOG = ProcessCatalog.of([*builtin_catalog().versions.values(), compile_definition(LEDGER)])
KEY = ("default", "o-1")


@pytest.fixture
def schema_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the real schema checks (`step_data.problem`) made while the test runs."""
    calls: list[int] = []
    real: Callable[..., Any] = step_data.problem

    def counted(schema: Any, data: Any) -> Any:
        calls.append(1)
        return real(schema, data)

    monkeypatch.setattr(step_data, "problem", counted)
    return calls


def ledger_step(seq: int, event_type: str, data: dict[str, Any], **extra: Any) -> Incoming:
    """A step of ledger order o-1 as bytes on the wire (parsed as every door parses)."""
    return Incoming.parse(json.dumps(step_json("o-1", "p-1", seq, event_type=event_type, data=data, **extra)))


def decide(items: list[Incoming], reads: BatchReads | None = None) -> BatchPlan:
    parts = Parts(CATALOG, default_limits={"max_order_amount": 100000})
    return plan_batch(items, reads or BatchReads(), parts, kind=IngressKind.HTTP, now=NOW)


def test_each_arriving_step_of_the_order_process_has_its_data_checked_once(schema_checks: list[int]) -> None:
    """Three steps of the shipped order process with schemas, applied in one batch: three schema checks."""
    plan = decide([Incoming.parse(json.dumps(step_json("o-1", "p-1", seq))) for seq in (1, 2, 3)])
    assert [a.decision for a in plan.answers] == [Decision.APPLY] * 3
    assert len(schema_checks) == 3


def test_a_buffered_successor_of_the_same_batch_is_checked_once(schema_checks: list[int]) -> None:
    """A step arriving before its predecessor (both in one batch, the process named) is checked on arrival and
    not again when it drains: one check per step."""
    plan = decide(
        [
            ledger_step(2, "PaymentProcessed", {"amount": 5}, process="ledger"),
            ledger_step(1, "OrderCreated", {"wallet": "0xabc"}, process="ledger"),
        ]
    )
    assert [a.decision for a in plan.answers] == [Decision.BUFFER, Decision.APPLY]
    assert plan.orders[0].status == "paid"
    assert len(schema_checks) == 2


def test_a_step_not_checked_on_arrival_is_checked_when_it_would_apply() -> None:
    """A step naming no process that arrives before its order's first step is not checked on arrival; when
    the first step (naming the ledger) drains it, its data is checked: REJECTED CHECK_FAILED (data)."""
    plan = decide(
        [
            ledger_step(2, "PaymentProcessed", {"amount": 0}),
            ledger_step(1, "OrderCreated", {"wallet": "0xabc"}, process="ledger"),
        ]
    )
    assert [a.decision for a in plan.answers] == [Decision.BUFFER, Decision.APPLY]
    [rejection] = plan.rejected
    assert (rejection.code, rejection.check_id) == (ErrorCode.CHECK_FAILED.value, "data")
    assert plan.orders[0].status == "opened"


def test_a_step_buffered_in_an_earlier_batch_is_checked_when_it_drains() -> None:
    """A buffered step read back from the database (not judged by this batch's arrival check) is checked when
    its order's first step drains it: its data failing is REJECTED CHECK_FAILED (data)."""
    body = step_json("o-1", "p-1", 2, event_type="PaymentProcessed", data={"amount": 0})
    reads = BatchReads(pending={KEY: {2: parse_envelope(json.dumps(body))}})
    plan = decide([ledger_step(1, "OrderCreated", {"wallet": "0xabc"}, process="ledger")], reads)
    assert [a.decision for a in plan.answers] == [Decision.APPLY]
    [rejection] = plan.rejected
    assert (rejection.code, rejection.check_id) == (ErrorCode.CHECK_FAILED.value, "data")
    assert plan.orders[0].status == "opened"
