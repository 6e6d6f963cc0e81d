"""A step's data against its process's JSON Schema (the step's `data:`): the validator, and what is wrong in
words. Pure: no I/O.

The schemas have two Nexus readings: `x-json-integer: true` on an integer means a JSON integer literal (`2`,
not `2.0`), and `format: date-time` is an ISO 8601 date and time whose offset may be absent (read as UTC), as
the envelope's `timestamp`; other formats are checked too. A problem is said as the envelope's own fields
are (pydantic's words), with the field's path from `data`, and never the value itself: it is echoed in API
answers, dead letters and logs.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Mapping
from typing import Any

import jsonschema_rs
from pydantic import TypeAdapter, ValidationError

from nexus_wire.envelope import Timestamp

MAX_PROBLEMS = 5
"""At most this many problems are named in one message."""

_TIMESTAMP: TypeAdapter[dt.datetime] = TypeAdapter(Timestamp)
_TYPE_WORDS = {"string": "a valid string", "integer": "a valid integer", "array": "a valid list",
               "object": "a valid dictionary", "number": "a valid number", "boolean": "a valid boolean"}  # fmt: skip
_INTEGER_WORDS = "Input should be a valid integer"


def _is_date_time(value: str) -> bool:
    try:
        _TIMESTAMP.validate_python(value)
    except ValidationError:
        return False
    return True


class _JsonInteger:
    """`x-json-integer: true`: an integer written as one (strict JSON decoding keeps 2.0 a float)."""

    def __init__(self, parent_schema: Any, value: Any, schema_path: Any) -> None:
        self.on = bool(value)

    def validate(self, instance: Any) -> None:
        if self.on and isinstance(instance, float):
            raise ValueError(_INTEGER_WORDS)


def data_validator(schema: Mapping[str, Any]) -> Any:
    """A compiled validator of a step's data schema, with the Nexus readings above."""
    return jsonschema_rs.validator_for(
        dict(schema),
        formats={"date-time": _is_date_time},
        validate_formats=True,
        keywords={"x-json-integer": _JsonInteger},
    )


def problem(validator: Any, data: Mapping[str, Any]) -> str | None:
    """What is wrong with `data` (`data.<path>: <words>`, at most `MAX_PROBLEMS`, `; `-joined), or None."""
    if validator.is_valid(data):
        return None
    parts = []
    for error in validator.iter_errors(data):
        path = [str(p)[:64] for p in error.instance_path][:8]
        kind = error.kind
        name = type(kind).__name__
        if name == "Required":
            path, words = [*path, str(kind.property)[:64]], "Field required"
        else:
            words = _words(name, kind, error.instance)
        parts.append(f"{'.'.join(['data', *path])}: {words}")
        if len(parts) == MAX_PROBLEMS:
            break
    return "; ".join(parts)


def _words(name: str, kind: Any, value: Any) -> str:
    if name in ("Minimum", "ExclusiveMinimum", "Maximum", "ExclusiveMaximum"):
        than = {"Minimum": "greater than or equal to", "ExclusiveMinimum": "greater than",
                "Maximum": "less than or equal to", "ExclusiveMaximum": "less than"}[name]  # fmt: skip
        return f"Input should be {than} {kind.limit}"
    if name in ("MinLength", "MaxLength", "MinItems", "MaxItems"):
        least = "at least" if name.startswith("Min") else "at most"
        unit = "character" if name.endswith("Length") else "item"
        return f"{'String' if unit == 'character' else 'List'} should have {least} {kind.limit} {unit}" + (
            "s" if kind.limit != 1 else ""
        )
    if name == "Pattern":
        # A pattern with an exponent is a decimal number written as a string (an amount).
        return _decimal_words(value) if "[eE]" in kind.pattern else f"String should match pattern '{kind.pattern}'"
    if name == "Type":
        types = sorted(str(t) for t in kind.types)
        if types == ["number", "string"]:
            return "Decimal input should be an integer, float, string or Decimal object"
        return "Input should be " + " or ".join(_TYPE_WORDS.get(t, t) for t in types if t != "null")
    if name == "Format":
        if kind.format == "date-time":
            return "Value error, expected an ISO 8601 date and time, e.g. 2026-01-01T10:00:00Z"
        return f"Input should be a valid {kind.format}"
    if name == "Custom":
        return _INTEGER_WORDS
    if name in ("Enum", "Constant"):
        return "Input should be one of the values the step's schema allows"
    if name == "AdditionalProperties":
        return "Extra fields not permitted: " + ", ".join(str(u)[:64] for u in kind.unexpected[:MAX_PROBLEMS])
    return f"Input does not match the step's schema ({name})"


def _decimal_words(value: Any) -> str:
    try:
        number = decimal.Decimal(str(value).strip())
    except decimal.InvalidOperation:
        return "Input should be a valid decimal"
    if not number.is_finite():
        return "Input should be a finite number"
    return "Input should be greater than or equal to 0" if number < 0 else "Input should be a valid decimal"
