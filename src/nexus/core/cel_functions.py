"""Functions the core registers in the CEL checks' environment, for what CEL cannot say in linear time.

CEL has no fold and no grouping: comparing two lists as multisets takes a walk of one inside a walk of
the other (``a.all(x, b.exists(y, ...))``: quadratic, and not even a multiset comparison). `same_items`
does it in one pass over each list. Pure.
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


def same_items(first: object, second: object) -> bool:
    """`same_items(a, b)`: the two lists hold the same elements, each as many times (multiset equality)."""
    if not isinstance(first, list) or not isinstance(second, list):
        raise TypeError("same_items() takes two lists")
    if len(first) != len(second):
        return False
    return Counter(map(_canonical, first)) == Counter(map(_canonical, second))
