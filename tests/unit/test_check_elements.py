"""The maps of a list reach CEL with only the fields the rules read from them, and no verdict changes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nexus.core import process_checks
from nexus.core.checks import element_fields_used
from nexus.core.process_checks import validate_step
from nexus.core.process_model import CompiledProcess
from nexus.processes import builtin_catalog

LIMITS = {"max_order_amount": 100000}
A = {"product_id": "a", "quantity": 2, "unit_price": "3.50"}
B = {"product_id": "b", "quantity": 1, "unit_price": "3.00"}


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("data.total == sum(data.items, 'quantity', 'unit_price')", {"data": {"items": {"quantity", "unit_price"}}}),
        (
            "!has(data.reserved) || same_items(data.reserved, order.items, 'product_id', \"quantity\")",
            {"data": {"reserved": {"product_id", "quantity"}}, "order": {"items": {"product_id", "quantity"}}},
        ),
        ("has(data.items)", {"data": {"items": set()}}),
        ("sum(data.items, 'q') > 0 && size(data.items) > 1", {}),
        ("sum(data.items) > 0", {}),
        ("same_items(data.a, order.b)", {}),
        ("same_items(data.a, order.b, 'x') && data.a.all(i, i.y > 0)", {"order": {"b": {"x"}}}),
        ("sum(data.items[0].parts, 'q') > 0", {}),
        ("sum(data.items, r'q') > 0", {}),
        ("data.note == 'data.items' && sum(data.items, 'q') > 0", {}),
    ],
)
def test_only_lists_read_by_named_fields_are_pruned(rule: str, expected: dict[str, dict[str, set[str]]]) -> None:
    """A list is pruned to the fields `sum`/`same_items` name only when every mention of it is such a call
    or `has`; any other use (index, macro, size, a raw or quoted mention) keeps its maps whole."""
    found = element_fields_used([rule])
    assert {k: {f: set(v) for f, v in fields.items()} for k, fields in found.items()} == expected


def test_the_order_steps_convert_only_the_item_fields_their_rules_read() -> None:
    """OrderCreated's items reach CEL without product_id, InventoryValidated's both lists without unit_price."""
    process = builtin_catalog().get("order")
    assert process is not None
    created = process.steps["OrderCreated"]
    data = {"user_id": "u", "items": [A, B], "total_amount": "10.00", "currency": "USD"}
    variables = process_checks._variables(
        process, created, created.fields, created.elements, {}, "OrderCreated", 1, data, LIMITS
    )
    assert variables["data"]["items"] == [{"quantity": 2, "unit_price": 350}, {"quantity": 1, "unit_price": 300}]
    facts = process.facts_after({}, "OrderCreated", data)
    inventory = process.steps["InventoryValidated"]
    variables = process_checks._variables(
        process, inventory, inventory.fields, inventory.elements, facts, "InventoryValidated", 2,
        {"warehouse_id": "w", "reserved_items": [B, A]}, LIMITS,
    )  # fmt: skip
    assert variables["data"]["reserved_items"] == [
        {"product_id": "b", "quantity": 1},
        {"product_id": "a", "quantity": 2},
    ]
    assert variables["order"]["items"] == [{"product_id": "a", "quantity": 2}, {"product_id": "b", "quantity": 1}]


def _whole(process: CompiledProcess) -> CompiledProcess:
    steps = {name: dataclasses.replace(step, elements={}) for name, step in process.steps.items()}
    return dataclasses.replace(process, steps=steps)


ITEM_VARIANTS: list[list[Any]] = [
    [A, B],
    [B, A],
    [A | {"name": "extra", "tags": ["x"]}, B],
    [A, B, {"product_id": "c", "quantity": 1, "unit_price": "0"}],
    [{"product_id": "a", "quantity": 1, "unit_price": "3.50"}, B],
    [{"product_id": "a", "quantity": 2}, B],
    [A, "not a map"],
    [],
]


@pytest.mark.parametrize("items", ITEM_VARIANTS)
@pytest.mark.parametrize("total", ["10.00", "9.99", 10])
def test_pruned_and_whole_lists_give_the_same_verdicts(items: list[Any], total: object) -> None:
    """Every step of the order process decides the same with its lists pruned as with them whole: extra
    fields, missing fields, elements that are not maps, other counts and totals."""
    pruned = builtin_catalog().get("order")
    assert pruned is not None
    whole = _whole(pruned)
    created: dict[str, Any] = {"user_id": "u", "items": items, "total_amount": total, "currency": "USD"}
    order_items = [A, B]
    facts = pruned.facts_after({}, "OrderCreated", {**created, "items": order_items})
    status = pruned.status_after("OrderCreated")
    cases: list[tuple[str | None, dict[str, Any], str, int, dict[str, Any]]] = [
        (None, {}, "OrderCreated", 1, created),
        (status, facts, "InventoryValidated", 2, {"warehouse_id": "w", "reserved_items": items}),
        (status, facts, "InventoryValidated", 2, {"warehouse_id": "w"}),
    ]
    for state, known, step, seq, data in cases:
        expected = validate_step(whole, state, known, step, seq, data, LIMITS)
        assert validate_step(pruned, state, known, step, seq, data, LIMITS) == expected, (step, data)
