"""Functions the core registers in the CEL checks' environment, for what CEL cannot say in linear time.

CEL has no fold and no grouping: comparing two lists as multisets takes a walk of one inside a walk of
the other (``a.all(x, b.exists(y, ...))``: quadratic, and not even a multiset comparison), and this
engine's ``map`` copies its result once per item (quadratic too), so projecting the items first does not
help. `same_items` does it in one pass over each list, projecting in Python, and `list_sum` (CEL's `sum`)
folds a list, or the products of its maps' fields, in one pass. Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any


def _canonical(value: Any) -> Any:
    """A hashable form of a CEL value, equal for equal values (1 and 1.0 as CEL compares them; true is
    not 1)."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, list | tuple):
        return ("l", tuple(_canonical(v) for v in value))
    if isinstance(value, Mapping):
        return ("m", frozenset((_canonical(k), _canonical(v)) for k, v in value.items()))
    return (type(value).__name__, value)


def same_items(first: object, second: object, *fields: object) -> bool:
    """`same_items(a, b)`: the two lists hold the same elements, each as many times (multiset equality).
    `same_items(a, b, "f", "g")`: the same, comparing each element (a map) by its fields f and g only (a
    missing field is null)."""
    if not isinstance(first, list) or not isinstance(second, list):
        raise TypeError("same_items() takes two lists")
    if not all(isinstance(f, str) for f in fields):
        raise TypeError("same_items() takes field names after its lists")
    if len(first) != len(second):
        return False
    return _counted(first, fields) == _counted(second, fields)


def _counted(items: list[Any], fields: tuple[object, ...]) -> Counter[Any]:
    if not fields:
        return Counter(map(_canonical, items))
    if not all(type(i) is dict or isinstance(i, Mapping) for i in items):
        raise TypeError("same_items() with fields compares maps")
    if len(fields) == 2:  # the usual comparison (product and quantity), without a generator per item
        first, second = fields
        return Counter((_key(i.get(first)), _key(i.get(second))) for i in items)
    return Counter(tuple(_key(i.get(f)) for f in fields) for i in items)


def _key(value: Any) -> Any:
    """`_canonical`, with the exact types of an item's fields (str, int, float) taken without its tests."""
    kind = type(value)
    if kind is str:
        return ("str", value)
    if kind is int or kind is float:
        return ("n", value)
    return _canonical(value)


def list_sum(values: object, *fields: object) -> object:
    """`sum(list)`: the sum of the numbers; `sum(list, "a", "b")`: the sum over the list's maps of the
    product of their fields a and b (an order's total: ``sum(data.items, "quantity", "unit_price")``)."""
    if not isinstance(values, list):
        raise TypeError("sum() takes a list")
    if not all(isinstance(f, str) for f in fields):
        raise TypeError("sum() takes field names after its list")
    total: int | float = 0
    if not fields:
        for v in values:
            total += v if type(v) is int or type(v) is float else _number(v)
        return total
    for v in values:
        if type(v) is not dict and not isinstance(v, Mapping):
            raise TypeError("sum() with fields takes a list of maps")
        product: int | float = 1
        for field in fields:
            factor = v.get(field)
            product *= factor if type(factor) is int or type(factor) is float else _number(factor)
        total += product
    return total


def _number(v: object) -> int | float:
    """`v` as a number `sum` adds (the exact types int and float are taken without this call)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TypeError("sum() takes numbers")
    return v
