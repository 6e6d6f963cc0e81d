"""Lists a step's checks read only through `sum`, `same_items` or `has`, kept on the Python side of the engine.

Converting a list of maps into CEL values is most of a check's cost (a 1,000-item step: ~2.6 ms in
`Context.update`, holding the GIL), and for a list read only by the core's own functions it buys nothing: the
engine converts it back into Python to call them (~1 ms more; benchmarks/check_cost.py). Such a list
(`checks.element_fields_used` finds them) reaches the engine as a handle, a short `bytes` value, and the
functions registered for the step look the list up by its handle. A JSON body holds no bytes, so a handle is
never a value of the step.

Every verdict stays the one the engine gives with the list converted: a list is held only when the engine
would hand every value of it back unchanged (`engine_keeps`); any other list (an integer beyond 64 bits,
which the engine makes a float; a string it cannot convert, which fails the conversion) is converted as
before. `has()` of a handle is true, as of the list. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nexus.core.cel_functions import list_sum, same_items

_PREFIX = b"\x00nexus-list:"
_LOWEST = -(2**63)
_BEYOND = 2**64
"""The engine keeps integers in [-2**63, 2**64) as integers (int64, then uint64); others become floats."""


def engine_keeps(value: object) -> bool:
    """Whether the engine, given `value`, hands it back to a function equal and of the same types."""
    kind = type(value)
    if kind is dict and isinstance(value, dict):
        return _map_kept(value)
    if kind is list and isinstance(value, list):
        return all(_map_kept(v) if type(v) is dict else engine_keeps(v) for v in value)
    if kind is str and isinstance(value, str):
        return value.isascii() or _utf8(value)
    if kind is int and isinstance(value, int):
        return _LOWEST <= value < _BEYOND
    return kind is float or kind is bool or value is None


def _map_kept(value: dict[Any, Any]) -> bool:
    # A list's maps are most of what is held: their scalars are judged here without a call each.
    for key, item in value.items():
        if type(key) is not str or not (key.isascii() or _utf8(key)):
            return False
        kind = type(item)
        if kind is int:
            if not _LOWEST <= item < _BEYOND:
                return False
        elif kind is str:
            if not (item.isascii() or _utf8(item)):
                return False
        elif kind is not float and kind is not bool and item is not None and not engine_keeps(item):
            return False
    return True


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate: the engine refuses to convert it
        return False
    return True


class ListHandles:
    """The lists of one step's evaluation held by handle, and the CEL functions that read them."""

    __slots__ = ("_lists",)

    def __init__(self) -> None:
        self._lists: dict[bytes, list[Any]] = {}

    def hold(self, value: object) -> object:
        """A handle standing for the list `value` in the engine, or `value` itself when it is not a list
        the engine would hand back unchanged (it is then converted, as without handles)."""
        if type(value) is not list:
            return value
        try:
            kept = engine_keeps(value)
        except RecursionError:  # nested deeper than any parser here accepts: left to the engine
            kept = False
        if not kept:
            return value
        handle = _PREFIX + str(len(self._lists)).encode()
        self._lists[handle] = value
        return handle

    def hold_fields(self, variable: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a context variable with each of its lists named in `fields` held by handle."""
        return {k: self.hold(v) if k in fields else v for k, v in variable.items()}

    def resolve(self, value: object) -> object:
        """The list a handle stands for; any other value unchanged."""
        return self._lists.get(value, value) if type(value) is bytes else value

    def functions(self) -> dict[str, Callable[..., object]]:
        """`sum` and `same_items` (core/cel_functions.py), reading held lists through their handles."""

        def held_sum(values: object, *fields: object) -> object:
            return list_sum(self.resolve(values), *fields)

        def held_same_items(first: object, second: object, *fields: object) -> bool:
            return same_items(self.resolve(first), self.resolve(second), *fields)

        return {"sum": held_sum, "same_items": held_same_items}
