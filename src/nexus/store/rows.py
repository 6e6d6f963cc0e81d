"""Rows to values: a frozen dataclass whose fields are a row's columns of the same names, or a row as the
API shows it (JSON values, named as its columns)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

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
