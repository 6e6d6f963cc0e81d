"""The answer for an item the database refused (nexus.core.decide.refusals): its code and safe words."""

from __future__ import annotations

import pytest

from nexus.core.decide.refusals import EVENT_ID_CONSTRAINTS, refusal
from nexus.errors import ErrorCode, PermanentDatabaseError


def _refused(constraint: str | None) -> PermanentDatabaseError:
    error = PermanentDatabaseError("the database rejected the operation (SQLSTATE 23505)")
    error.constraint = constraint
    return error


@pytest.mark.parametrize("constraint", sorted(EVENT_ID_CONSTRAINTS))
def test_a_reused_event_id_is_an_invalid_event(constraint: str) -> None:
    """A step whose event_id another step already uses is INVALID_EVENT, said in the sender's words."""
    error = refusal(_refused(constraint))
    assert (error.code, str(error)) == (ErrorCode.INVALID_EVENT, "event_id is already used by another step")


def test_another_permanent_refusal_keeps_its_code_and_says_what_was_refused() -> None:
    """Any other permanent refusal keeps the error's code and its (driver-free) message."""
    error = refusal(_refused("some_check"))
    assert error.code is ErrorCode.DATABASE_REJECTED
    assert str(error) == "the database rejected the operation (SQLSTATE 23505): the item cannot be stored"


def test_anything_else_is_database_rejected_without_its_text() -> None:
    """An exception that is not the database's (e.g. not serializable) never shows its own text."""
    error = refusal(TypeError("Object of type set is not JSON serializable: secret"))
    assert (error.code, str(error)) == (ErrorCode.DATABASE_REJECTED, "the item cannot be serialized or stored")
