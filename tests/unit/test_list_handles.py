"""Lists held by handle: a step's lists read only through `sum`, `same_items` or `has` stay on the Python side of
the CEL engine, and every verdict is the one the engine gives with the lists converted."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core import cel_functions, process_checks
from nexus.core.cel_engine import cel
from nexus.core.cel_functions import same_items
from nexus.core.checks import convert_money, pick
from nexus.core.list_handles import ListHandles, engine_keeps
from nexus.core.process_checks import validate_step
from nexus.core.process_model import CompiledProcess
from nexus.processes import builtin_catalog

LIMITS = {"max_order_amount": 10**20}
BIG = 2**64 // 100 + 1
"""A unit price whose amount in cents (2**64 + 84) the engine turns into a float."""


def _order() -> CompiledProcess:
    process = builtin_catalog().get("order")
    assert process is not None
    return process


def _as_before(value: Any, fields: Any, elements: Any, money: Any, exponent: int) -> Any:
    """The variable as the checks built it before lists were held: picked, then its money converted."""
    picked = pick(value, fields, elements)
    return convert_money(picked, money, exponent) if money else picked


def _engine_round_trip(value: object) -> tuple[str, object]:
    """What a function registered in the engine receives for `value` put in the context."""
    seen: list[object] = []
    context = cel.Context()
    context.add_function("probe", lambda v: seen.append(v) or True)
    try:
        context.update({"v": value})
        cel.compile("probe(v)").execute(context)
    except Exception as exc:
        return ("raised", type(exc).__name__)
    return ("value", seen[0])


def _same(a: object, b: object) -> bool:
    """Equal, with the same types throughout (1 == 1.0 is not the same value for a check)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (a != a and b != b)  # NaN is kept as NaN


CORNERS: list[tuple[object, bool]] = [
    ([], True),
    ([{"quantity": 1, "unit_price": 100}], True),
    ([2**63 - 1, -(2**63), 2**63, 2**64 - 1], True),
    ([2**64], False),
    ([-(2**63) - 1], False),
    ([10**30], False),
    ([1.5, float("nan"), float("inf"), True, False, None], True),
    (["plain", "naïve", "日本"], True),
    (["\ud800"], False),
    ([{"\ud800": 1}], False),
    ([{"a": "\udfff"}], False),
    ([{"a": {"b": [1, {"c": 2**70}]}}], False),
    ([{"a": {"b": [1, {"c": 2}]}}], True),
    ([[1, [2, [3]]]], True),
    ([(1, 2)], False),
    ([{1: 2}], False),
    ([b"bytes"], False),
]


@pytest.mark.parametrize(("value", "kept"), CORNERS, ids=repr)
def test_a_list_is_held_only_when_the_engine_would_hand_it_back_unchanged(value: object, kept: bool) -> None:
    """`engine_keeps` says yes only for values the engine gives back to a function equal and of the same
    types (integers past 64 bits become floats, lone surrogates fail, tuples become lists), and for the
    plain values of a step (a conservative no, as for int keys or bytes, only costs the conversion)."""
    outcome = _engine_round_trip(value)
    assert engine_keeps(value) is kept
    if kept:
        assert outcome[0] == "value" and _same(outcome[1], value), outcome


def test_handles_resolve_to_their_lists_and_leave_other_values_alone() -> None:
    """A held list comes back through its handle; a list the engine would change, and any other value
    (bytes that are not a handle included), are left as they are."""
    handles = ListHandles()
    items = [{"quantity": 2, "unit_price": 150}]
    held = handles.hold(items)
    assert type(held) is bytes and handles.resolve(held) is items
    assert handles.hold([2**64]) == [2**64] and handles.hold("text") == "text"
    assert handles.resolve(b"other") == b"other" and handles.resolve(held + b"0") == held + b"0"
    total = handles.functions()["sum"](held, "quantity", "unit_price")
    assert total == 300


def test_a_1000_item_step_hands_the_engine_a_handle_not_its_items() -> None:
    """OrderCreated's 1,000 items reach the engine as one short handle: its `sum` reads them in Python."""
    process = _order()
    created = process.steps["OrderCreated"]
    items = [{"product_id": f"p{i}", "quantity": 1, "unit_price": 1} for i in range(1000)]
    variables = process_checks._variables(
        process, created, created.fields, created.elements, {}, "OrderCreated", 1, {"items": items}, LIMITS
    )
    handles = process_checks._hold_lists(created, variables)
    assert handles is not None and type(variables["data"]["items"]) is bytes
    assert handles.resolve(variables["data"]["items"]) == [{"quantity": 1, "unit_price": 100}] * 1000


def _items(n: int, price: object = 1) -> list[dict[str, Any]]:
    return [{"product_id": f"p{i}", "quantity": 1, "unit_price": price} for i in range(n)]


HUGE = [{"product_id": "big", "quantity": 1, "unit_price": BIG}, *_items(999)]

CASES: list[tuple[list[Any], object]] = [
    ([], 0),
    ([], 1),
    (_items(1000), 1000),
    (_items(1000), 1),
    (_items(1000, "0.01"), 10),
    (_items(1001), 1001),
    (HUGE, BIG + 999),
    (HUGE, BIG),
    ([{"product_id": "q", "quantity": 2**63 - 1, "unit_price": 1000}], (2**63 - 1) * 1000),
    ([{"product_id": "f", "quantity": 3, "unit_price": 0.1}], "0.30"),
    ([{"product_id": "s", "quantity": 1, "unit_price": "\ud800"}], 1),
    ([{"product_id": "m", "quantity": 1}], 0),
    (["not a map"], 0),
]


def _decide(process: CompiledProcess, state: str | None, facts: dict[str, Any], step: str, data: Any) -> object:
    try:
        return validate_step(process, state, facts, step, 1, data, LIMITS, data_checked=True)
    except Exception as exc:
        return ("raised", type(exc).__name__)


@pytest.mark.parametrize(("items", "total"), CASES, ids=range(len(CASES)))
def test_held_and_converted_lists_give_the_same_verdicts(
    items: list[Any], total: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every order step decides the same with its lists held as with them converted (the checks before
    lists were held, each map picked then its money converted): an empty list, 1,000
    items at the limit and 1,001 over it, a right and a wrong total, amounts past 64 bits (whose float
    rounding the engine applies), a string the engine cannot convert, missing fields, an element not a map."""
    held = _order()
    created = {"user_id": "u", "items": items, "total_amount": total, "currency": "USD"}
    order_items = _items(3)
    facts = held.facts_after({}, "OrderCreated", {**created, "items": order_items})
    status = held.status_after("OrderCreated")
    cases: list[tuple[str | None, dict[str, Any], str, dict[str, Any]]] = [
        (None, {}, "OrderCreated", created),
        (status, facts, "InventoryValidated", {"warehouse_id": "w", "reserved_items": items}),
        (status, facts, "InventoryValidated", {"warehouse_id": "w", "reserved_items": order_items[::-1]}),
        (status, {**facts, "items": items}, "InventoryValidated", {"warehouse_id": "w", "reserved_items": items}),
    ]
    now = [_decide(held, state, known, step, data) for state, known, step, data in cases]
    monkeypatch.setattr(process_checks, "_hold_lists", lambda compiled, variables: None)
    monkeypatch.setattr(process_checks, "pick_money", _as_before)
    before = [_decide(held, state, known, step, data) for state, known, step, data in cases]
    assert now == before


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=3), st.binary(max_size=2))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=6,
)
items = st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), values, max_size=3), max_size=6)


@settings(max_examples=500)
@given(values)
def test_an_item_field_keys_as_the_canonical_form_does(value: object) -> None:
    """`same_items`' shortcut for an item's strings and numbers gives the key `_canonical` gives (1 and 1.0
    alike, true not 1), for every value."""
    assert cel_functions._key(value) == cel_functions._canonical(value)


@settings(max_examples=500)
@given(items, st.data(), st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3))
def test_same_items_counts_by_fields_as_the_canonical_form_does(
    first: list[Any], data: st.DataObject, fields: list[str]
) -> None:
    """`same_items(a, b, fields...)` answers as comparing the counts of each item's canonical fields, with
    one, two (the shortcut) or three fields: for a list against itself reordered, with one field of one item changed."""
    second = data.draw(st.permutations(first))
    if second and data.draw(st.booleans()):  # one field of one item changed
        changed = data.draw(st.integers(0, len(second) - 1))
        second[changed] = {**second[changed], data.draw(st.sampled_from(fields)): data.draw(values)}

    def counted(some: list[Any]) -> Counter[Any]:
        return Counter(tuple(cel_functions._canonical(i.get(f)) for f in fields) for i in some)

    assert same_items(first, second, *fields) is (len(first) == len(second) and counted(first) == counted(second))


def test_a_list_nested_past_the_recursion_limit_is_left_to_the_engine() -> None:
    """A list too deep to walk in Python is not held (the engine converts it, or refuses, as before)."""
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    assert ListHandles().hold(deep) is deep
