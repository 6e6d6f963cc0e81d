"""store/rows.from_row: a value's fields are read from the row's columns of the same names."""

from __future__ import annotations

import dataclasses

import pytest

from nexus.core.breaker import Breaker, BreakerState
from nexus.store.rows import from_row


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
