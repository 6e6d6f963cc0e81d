"""Bounded check cost: lists in a step's data are limited, and rules that grow faster than linearly are refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nexus.core import rule_cost
from nexus.core.cel_functions import list_sum, same_items
from nexus.core.process_checks import validate_step
from nexus.core.process_compile import compile_definition
from nexus.core.process_model import CompiledProcess, DefinitionError
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog, builtin_sources

LIMITS = {"max_order_amount": 100000}
QUADRATIC = "data.wanted.all(w, data.offered.exists(o, o == w))"

LISTS = """name: lists
version: 1
states: [a, done]
terminal: [done]
steps:
  Start:
    from: [null]
    to: a
    data: {type: object, properties: {wanted: {type: array}, offered: {type: array}, label: {type: string}}}
    checks:
      - id: offered_covers_wanted
        rule: "RULE"
  Finish: {from: [a], to: done}
"""


def _items(n: int, reverse: bool = False) -> list[dict[str, Any]]:
    items = [{"product_id": f"p{i}", "quantity": 1 + i % 3, "unit_price": 1} for i in range(n)]
    return items[::-1] if reverse else items


def _inventory(process: CompiledProcess, order_items: list[dict[str, Any]], reserved: list[dict[str, Any]]) -> Any:
    facts = {"items": order_items, "currency": "USD"}
    data = {"warehouse_id": "w", "reserved_items": reserved}
    return validate_step(process, "created", facts, "InventoryValidated", 2, data, LIMITS)


@pytest.mark.parametrize("name", ["order", "order_reviewed"])
def test_reserved_items_must_be_the_orders_items_as_a_multiset(name: str) -> None:
    """p1 x3 + p2 x2 reserved as p1 x3 twice is refused; the same lines in another order pass."""
    process = builtin_catalog().latest[name]
    # Reserved lines are order lines (order.yaml's schema requires their unit_price, as the order's items).
    p1, p2 = {"product_id": "p1", "quantity": 3, "unit_price": 1}, {"product_id": "p2", "quantity": 2, "unit_price": 1}
    order_items = [p1, p2]
    twice = _inventory(process, order_items, [p1] * 2)
    assert twice is not None and twice.check == "reserved_items_match_order"
    assert _inventory(process, order_items, order_items[::-1]) is None
    wrong = _inventory(process, order_items, [p1, {**p2, "quantity": 1}])
    assert wrong is not None and wrong.check == "reserved_items_match_order"


def test_shipped_rules_walk_each_list_once_and_accept_the_limit_reversed() -> None:
    """Every shipped rule visits each list once, outside any other walk (no map or filter, which this
    engine runs in quadratic time); 1,000 items reserved in reverse order pass the check."""
    for source in builtin_sources():
        process = compile_definition(source.text)
        for name, step in process.definition.steps.items():
            bounds = rule_cost.Bounds(1000, step.data or None)
            for check in step.checks:
                found = rule_cost.walks(check.rule, bounds)
                assert all(w.depth == 0 and w.visits <= 1000 for w in found), (source.origin, name, found)
    order = builtin_catalog().latest["order"]
    assert _inventory(order, _items(1000), _items(1000, reverse=True)) is None


def test_the_old_quadratic_rule_is_refused_with_its_reason_and_line() -> None:
    """The `.all` x `.exists` rule is refused at load, naming the step, the check, the inner walk and the line."""
    with pytest.raises(DefinitionError) as info:
        compile_definition(LISTS.replace("RULE", QUADRATIC))
    reason = str(info.value)
    assert "step Start, check offered_covers_wanted" in reason and "faster than linearly" in reason
    assert "data.offered.exists" in reason and "1,000,000 visits" in reason
    assert info.value.line == 11


@pytest.mark.parametrize(
    ("rule", "change"),
    [
        ("data.wanted.all(w, w in data.offered)", ""),  # `in` walks its list
        ("data.wanted.all(w, sum(data.offered) > w)", ""),  # so do the core's list functions
        ("data.wanted.map(w, data.offered.filter(o, o == w)).size() > 0", ""),
        ("data.wanted.map(w, w * 2).size() > 0", ""),  # this engine's map copies its result per item
        ("data.wanted.filter(w, w > 2).size() > 0", ""),
        ("data.wanted.all(w, size(data.offered) > 0)", ""),  # a list read inside a walk is copied per read
        ("data.wanted.all(w, data.offered[0] == w)", ""),
        ("data.wanted.all(w, w != data.unknown)", ""),  # no schema: it may be a list
        (QUADRATIC, "max_list_items: 100\n"),  # 100 x 100 is still over 16 x 100
    ],
)
def test_other_quadratic_rules_are_refused(rule: str, change: str) -> None:
    """`in`, list functions, macros and list reads inside another walk over an unbounded list, and map or
    filter over one, are refused alike."""
    with pytest.raises(DefinitionError, match="faster than linearly"):
        compile_definition(change + LISTS.replace("RULE", rule))


@pytest.mark.parametrize(
    ("prefix", "offered", "rule"),
    [
        ("max_list_items: 16\n", "{type: array}", QUADRATIC),  # the whole process at 16 items: 256 visits
        ("", "{type: array, maxItems: 16}", QUADRATIC),  # the inner list bounded far below the limit
        ("", "{type: array}", "data.wanted.all(w, w in ['a', 'b'])"),  # a literal list
        ("", "{type: array}", "data.wanted.all(w, w != '') && data.offered.exists(o, o != '')"),
        ("", "{type: array}", "data.wanted.all(w, w != data.label && w <= limits.max_order_amount)"),  # scalars
        ("", "{type: array, maxItems: 100}", "data.offered.map(o, o * 2).size() > 0"),  # 100 x 100 <= 16,000
        ("", "{type: array}", "sum(data.offered, 'quantity', 'unit_price') > 0 && same_items(data.offered, [])"),
    ],
)
def test_linear_and_bounded_rules_load(prefix: str, offered: str, rule: str) -> None:
    """Walks one after the other, over literals, or whose inner list is bounded far below the limit load."""
    compile_definition(prefix + LISTS.replace("offered: {type: array}", f"offered: {offered}").replace("RULE", rule))


def test_processes_check_says_why_a_rule_is_refused(tmp_path: Path) -> None:
    """`nexus processes check` exits 1 with the file, the line and why the rule's cost is refused."""
    bad = tmp_path / "quadratic.yaml"
    bad.write_text(LISTS.replace("RULE", QUADRATIC))
    done = subprocess.run(
        [sys.executable, "-m", "nexus.cli", "processes", "check", str(bad)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert f"{bad}:11:" in done.stderr and "grows faster than linearly" in done.stderr


def test_a_stored_definition_registered_before_loads_unjudged() -> None:
    """A version already registered (its orders pinned to it) still loads with `judge_cost=False`."""
    process = compile_definition(LISTS.replace("RULE", QUADRATIC), judge_cost=False)
    assert process.steps["Start"].rules


def test_a_list_over_the_limit_is_limit_exceeded_before_any_rule() -> None:
    """1,001 items (or a nested list of 1,001) is REJECTED LIMIT_EXCEEDED, check max_list_items; 1,000 pass."""
    order = builtin_catalog().latest["order"]
    for data in (
        {"items": _items(1001), "total_amount": 1001},
        {"items": [{**_items(1)[0], "tags": list(range(1001))}], "total_amount": 1},
    ):
        verdict = validate_step(order, None, {}, "OrderCreated", 1, data, LIMITS)
        assert verdict is not None
        assert (verdict.code, verdict.check) == (ErrorCode.LIMIT_EXCEEDED, "max_list_items")
        assert "1001 items" in verdict.message and "p0" not in verdict.message
    total = sum(i["quantity"] for i in _items(1000))
    assert (
        validate_step(order, None, {}, "OrderCreated", 1, {"items": _items(1000), "total_amount": total}, LIMITS)
        is None
    )


def test_the_tenant_limit_lowers_the_process_limit_but_never_raises_it() -> None:
    """A tenant's max_list_items below the process's applies; one above it is ignored."""
    process = compile_definition("max_list_items: 5\n" + LISTS.replace("RULE", "true"))
    data = {"wanted": [1, 2, 3, 4]}

    def verdict(limits: dict[str, Any], d: dict[str, Any]) -> Any:
        return validate_step(process, None, {}, "Start", 1, d, limits)

    assert verdict({}, data) is None
    lowered = verdict({"max_list_items": 3}, data)
    assert lowered is not None and lowered.check == "max_list_items" and "at most 3" in lowered.message
    raised = verdict({"max_list_items": 100}, {"wanted": list(range(6))})
    assert raised is not None and "at most 5" in raised.message


def test_same_items_is_multiset_equality() -> None:
    """Counts matter, order does not, CEL's 1 == 1.0 holds and true is not 1; with fields, only those count."""
    assert same_items([["p1", 3], ["p2", 2]], [["p2", 2], ["p1", 3]])
    a = [{"product_id": "p1", "quantity": 3, "unit_price": 1}, {"product_id": "p2", "quantity": 2}]
    b = [{"product_id": "p2", "quantity": 2, "unit_price": 9}, {"product_id": "p1", "quantity": 3}]
    assert same_items(a, b, "product_id", "quantity") and not same_items(a, b)
    assert not same_items(a, [a[0], a[0]], "product_id", "quantity")
    assert not same_items([["p1", 3], ["p1", 3]], [["p1", 3], ["p2", 2]])
    assert same_items([1, {"a": [1]}], [{"a": [1.0]}, 1.0])
    assert not same_items([True], [1])
    with pytest.raises(TypeError):
        same_items("ab", ["a", "b"])


def test_sum_with_fields_is_the_sum_of_their_products() -> None:
    """`sum(items, "quantity", "unit_price")` is the order's total; a missing or non-number field is an error."""
    items = [{"quantity": 2, "unit_price": 150}, {"quantity": 1, "unit_price": 5}]
    assert list_sum(items, "quantity", "unit_price") == 305 and list_sum([1, 2.5]) == 3.5
    for bad in ([{"quantity": 2}], [{"quantity": True, "unit_price": 1}], [3]):
        with pytest.raises(TypeError):
            list_sum(bad, "quantity", "unit_price")
