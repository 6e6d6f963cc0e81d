"""Rows to values: a frozen dataclass whose fields are a row's columns of the same names."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
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
