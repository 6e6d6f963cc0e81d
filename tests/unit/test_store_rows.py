"""store/rows.from_row: a value's fields are read from the row's columns of the same names."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import pytest

from nexus.core.breaker import Breaker, BreakerState
from nexus.store.rows import from_row, row_json


@dataclasses.dataclass(frozen=True, slots=True)
class _Pair:
    name: str
    size: int


def test_fields_come_from_the_columns_of_their_names_and_extra_columns_are_ignored() -> None:
    """Each field takes its column; a column with no field is left out."""
    assert from_row(_Pair, {"size": 2, "name": "a", "other": 1}) == _Pair("a", 2)


def test_a_computed_field_wins_over_its_column() -> None:
    """A field given as a keyword is not read from the row (a column read into another type)."""
    row = {"state": "open", "failure_count": 3, "last_failure_at": None, "open_until": None,
           "probe_owner": None, "probe_until": None}  # fmt: skip
    breaker = from_row(Breaker, row, state=BreakerState(row["state"]))
    assert breaker.state is BreakerState.OPEN and breaker.failure_count == 3


def test_a_missing_column_is_an_error() -> None:
    """A field whose column the row lacks fails loudly rather than taking a default."""
    with pytest.raises(KeyError):
        from_row(_Pair, {"name": "a"})


def test_row_json_gives_the_named_fields_in_order_as_json_values() -> None:
    """Times become ISO 8601 text, UUIDs text, None stays None; a computed field replaces its column."""
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    ident = uuid.UUID(int=1)
    row = {"id": ident, "at": at, "gone": None, "seq_id": 3, "unused": 9}
    out = row_json(row, ("seq", "id", "at", "gone"), seq=row["seq_id"])
    assert list(out) == ["seq", "id", "at", "gone"]
    assert out == {"seq": 3, "id": str(ident), "at": "2026-01-02T03:04:05+00:00", "gone": None}
