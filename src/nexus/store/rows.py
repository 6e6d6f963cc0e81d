"""Rows to values: a frozen dataclass whose fields are a row's columns of the same names, or a row as the
API shows it (JSON values, named as its columns); and rows as one JSON parameter of a statement."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import orjson

T = TypeVar("T")


def from_row(cls: type[T], row: Mapping[str, Any], **computed: Any) -> T:
    """`cls` from the row's columns named as its fields; `computed` gives the fields read otherwise (a
    column turned into another type)."""
    values = {name: row[name] for name in _fields(cls) if name not in computed}
    return cls(**values, **computed)


_FIELDS: dict[type[Any], tuple[str, ...]] = {}


def _fields(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def row_json(row: Mapping[str, Any], names: Iterable[str], **computed: Any) -> dict[str, Any]:
    """The fields `names`, in that order, each its column of that name as a JSON value (a time in ISO 8601,
    a UUID as text, None as None) or, when given, its `computed` value (a renamed or derived field)."""
    return {name: computed[name] if name in computed else _json_value(row[name]) for name in names}


def _json_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _row(value: Any) -> Any:
    """orjson's fallback for `json_rows`: a row (a named tuple) as an array."""
    if isinstance(value, tuple):
        return tuple(value)
    raise TypeError(f"{type(value).__name__} is not a column value")


def json_rows(rows: Iterable[tuple[Any, ...]]) -> str:
    """Rows (tuples, named or not) as one JSON array of arrays, for a statement that takes a table as one
    jsonb parameter (`jsonb_array_elements`): uuids as text, datetimes in RFC 3339 with their offset."""
    return orjson.dumps(rows if isinstance(rows, list | tuple) else list(rows), default=_row).decode()
