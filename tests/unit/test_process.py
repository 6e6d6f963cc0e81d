"""Process definitions: loading, refusals with their line, money in minor units, the shipped schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nexus.core.checks import to_minor
from nexus.core.envelope import parse_envelope
from nexus.core.order_state import OrderState
from nexus.core.process_checks import validate_step
from nexus.core.process_compile import compile_definition
from nexus.core.process_model import DefinitionError
from nexus.core.sequencing import resolve
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog, schema_text
from nexus_wire.codes import Decision
from tests.factories import step_json

ROOT = Path(__file__).resolve().parents[2]
LIMITS = {"max_order_amount": 100000}

GOOD = """name: two
version: 1
states: [a, done]
terminal: [done]
steps:
  Start: {from: [null], to: a}
  Finish: {from: [a], to: done}
"""


def test_builtin_definitions_load() -> None:
    """The package ships `order` and `refund`; order's steps chain as the seed's five steps."""
    catalog = builtin_catalog()
    assert {"order", "refund"} <= set(catalog.latest)
    order = catalog.latest["order"]
    assert order.allowed[None] == ("OrderCreated",)
    assert order.allowed["shipped"] == ("OrderCompleted",)
    assert order.is_terminal("completed") and order.is_terminal("aborted") and not order.is_terminal("shipped")


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("name: x\nversion: 1\nstates: [a\nsteps: {}\n", 4, "YAML syntax error"),
        (GOOD.replace("to: done}", "to: finished}"), 7, "unknown state 'finished'"),
        (GOOD + "  Again: {from: [done], to: a}\n", 8, "terminal state 'done' has an outgoing step"),
        (GOOD.replace("version: 1", "version: zero"), 2, "version"),
        (GOOD.replace("{from: [a], to: done}", "{from: [a], to: done, checks: [{id: c, rule: 'data.(('}]}"), 7, "CEL"),
        (GOOD.replace("from: [null]", "from: [a]"), 5, "no initial step"),
    ],
)
def test_refused_definitions_name_their_line(text: str, line: int, fragment: str) -> None:
    """A syntax error, an unknown state, a terminal state with outgoing steps, a bad field, bad CEL and
    no initial step are refused, each with the line it is on."""
    with pytest.raises(DefinitionError) as info:
        compile_definition(text)
    assert fragment in str(info.value)
    assert info.value.line == line


@pytest.mark.processes
def test_processes_check_cli_exits_1_with_line(tmp_path: Path) -> None:
    """`nexus processes check FILE` exits 0 on a good file and 1 with FILE:LINE and the reason on a bad one."""
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    bad.write_text(GOOD + "  Again: {from: [done], to: a}\n")
    ok = subprocess.run(
        [sys.executable, "-m", "nexus.cli", "processes", "check", str(good)], capture_output=True, text=True
    )
    assert ok.returncode == 0 and "two v1" in ok.stdout
    no = subprocess.run(
        [sys.executable, "-m", "nexus.cli", "processes", "check", str(bad)], capture_output=True, text=True
    )
    assert no.returncode == 1
    assert f"{bad}:8:" in no.stderr and "outgoing step Again" in no.stderr


def test_money_is_compared_in_minor_units() -> None:
    """0.1 * 3 in binary floats is 30 cents, equal to three items at 0.10; JPY has no minor unit."""
    assert to_minor(0.1 * 3, 2) == 30
    assert to_minor("19.99", 2) == 1999
    assert to_minor(500, 0) == 500
    order = builtin_catalog().latest["order"]
    data = {"items": [{"product_id": "p", "quantity": 3, "unit_price": 0.1}], "total_amount": 0.1 * 3}
    assert validate_step(order, None, {}, "OrderCreated", 1, data, LIMITS) is None
    off = dict(data, total_amount=0.31)
    verdict = validate_step(order, None, {}, "OrderCreated", 1, off, LIMITS)
    assert verdict is not None and (verdict.code, verdict.check) == (ErrorCode.CHECK_FAILED, "total_matches_items")


def test_each_code_of_the_order_process() -> None:
    """Unknown type, out of turn (listing the allowed steps), wrong amount, wrong currency, over the limit."""
    order = builtin_catalog().latest["order"]
    facts = order.facts_after({}, "OrderCreated", {"items": [], "total_amount": "10.00", "currency": "USD"})
    cases = [
        ("Teleported", "created", {}, ErrorCode.UNKNOWN_STEP, None),
        ("PaymentProcessed", "created", {"amount": 10}, ErrorCode.INVALID_TRANSITION, None),
        (
            "PaymentProcessed",
            "inventory_validated",
            {"amount": 11},
            ErrorCode.CHECK_FAILED,
            "payment_amount_matches_order",
        ),
        (
            "PaymentProcessed",
            "inventory_validated",
            {"amount": 10, "currency": "EUR"},
            ErrorCode.CHECK_FAILED,
            "payment_currency_matches_order",
        ),
        ("PaymentProcessed", "inventory_validated", {"amount": 10}, None, None),
    ]
    for event_type, status, data, code, check in cases:
        verdict = validate_step(order, status, facts, event_type, 3, data, LIMITS)
        assert (verdict.code if verdict else None, verdict.check if verdict else None) == (code, check), event_type
    verdict = validate_step(order, "created", facts, "PaymentProcessed", 3, {}, LIMITS)
    assert verdict is not None and "allowed next steps: InventoryValidated, ABORT_PLAN" in verdict.message
    big = {"items": [{"product_id": "p", "quantity": 1, "unit_price": 100000.01}], "total_amount": 100000.01}
    verdict = validate_step(order, None, {}, "OrderCreated", 1, big, LIMITS)
    assert verdict is not None and (verdict.code, verdict.check) == (ErrorCode.LIMIT_EXCEEDED, "order_within_limit")


def test_a_check_that_cannot_evaluate_denies() -> None:
    """A missing field or an evaluation error denies: the rule must evaluate to exactly true."""
    text = GOOD.replace("{from: [a], to: done}", "{from: [a], to: done, checks: [{id: c, rule: 'data.x > 1'}]}")
    process = compile_definition(text)
    assert validate_step(process, "a", {}, "Finish", 2, {"x": 2}, {}) is None
    for data in ({}, {"x": "two"}):
        verdict = validate_step(process, "a", {}, "Finish", 2, data, {})
        assert verdict is not None and verdict.check == "c"


def test_shipped_schema_matches_models() -> None:
    """src/nexus/processes/schema.json and schemas/process.json hold exactly the definition schema."""
    expected = schema_text()
    assert (ROOT / "src/nexus/processes/schema.json").read_text(encoding="utf-8") == expected
    assert (ROOT / "schemas/process.json").read_text(encoding="utf-8") == expected
    assert json.loads(expected)["properties"]["steps"]


def test_data_schema_failure_is_check_failed_data() -> None:
    """A step whose data breaks its JSON Schema is CHECK_FAILED with check `data`, naming the field."""
    refund = builtin_catalog().latest["refund"]
    verdict = validate_step(refund, None, {}, "RefundRequested", 1, {"amount": 5, "currency": "eur"}, LIMITS)
    assert verdict is not None and (verdict.code, verdict.check) == (ErrorCode.CHECK_FAILED, "data")
    assert "reason" in verdict.message or "currency" in verdict.message


@pytest.mark.parametrize(
    ("process", "amount", "held"),
    [("order_reviewed", 1000.01, True), ("order_reviewed", 1000, False), ("order", 5000, False)],
)
def test_order_reviewed_holds_payments_above_1000_and_order_holds_none(process: str, amount: float, held: bool) -> None:
    """The shipped `order_reviewed` is `order` whose payment above 1000.00 waits for a person;
    `order` itself never holds a step."""
    item = [{"product_id": "p", "quantity": 1, "unit_price": amount}]
    bodies = [step_json("o", "p", 1, process=process), step_json("o", "p", 2), step_json("o", "p", 3)]
    bodies[0]["data"].update(items=item, total_amount=amount)
    bodies[2]["data"]["amount"] = amount
    events = [parse_envelope(json.dumps(b)) for b in bodies]
    limits = {"max_order_amount": 100000}
    resolution = resolve(OrderState("o"), events, {}, catalog=builtin_catalog(), limits=limits)
    payment = Decision.HELD if held else Decision.APPLY
    assert [d for _, d, _ in resolution.decisions] == [Decision.APPLY, Decision.APPLY, payment]
