"""Driver errors become typed errors at the adapter: transient means retrying can help."""

from __future__ import annotations

import asyncpg
import pytest

from nexus.errors import ErrorCode, PermanentDatabaseError, TransientDatabaseError
from nexus.store.errors import is_transient, wrap_db_errors


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError("refused"),
        TimeoutError(),
        asyncpg.exceptions.CannotConnectNowError("starting up"),
        asyncpg.exceptions.SerializationError("conflict"),
        asyncpg.exceptions.DeadlockDetectedError("deadlock"),
        asyncpg.exceptions.AdminShutdownError("shutdown"),
        asyncpg.exceptions.TooManyConnectionsError("too many"),
        asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress"),
    ],
)
def test_unreachable_or_conflicting_database_is_transient(exc: BaseException) -> None:
    """Connection failures, timeouts, serialization failures, deadlocks and shutdowns are retryable."""
    assert is_transient(exc)
    with pytest.raises(TransientDatabaseError) as info, wrap_db_errors():
        raise exc
    assert info.value.transient and info.value.code is ErrorCode.DATABASE_UNAVAILABLE
    assert info.value.__cause__ is exc


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.exceptions.UniqueViolationError("duplicate key"),
        asyncpg.exceptions.CheckViolationError("check"),
        asyncpg.exceptions.UntranslatableCharacterError("\\u0000 cannot be converted to text"),
    ],
)
def test_rejected_data_is_permanent(exc: BaseException) -> None:
    """Constraint violations and data the server refuses are permanent: retrying unchanged fails again."""
    assert not is_transient(exc)
    with pytest.raises(PermanentDatabaseError) as info, wrap_db_errors():
        raise exc
    assert not info.value.transient and info.value.code is ErrorCode.DATABASE_REJECTED
