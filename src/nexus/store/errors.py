"""Translate driver errors into the gateway's typed errors, at the adapter boundary."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import asyncpg

from nexus.errors import PermanentDatabaseError, TransientDatabaseError

# SQLSTATE classes that mean "try again": connection exceptions, serialization failures and deadlocks,
# insufficient resources, operator intervention (server shutting down), and cancels from timeouts.
_TRANSIENT_SQLSTATE_PREFIXES = ("08", "40", "53", "57", "58")


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.exceptions._base.DataError):
        # The driver refused to encode an argument (out of range, not encodable): the same call fails again.
        return False
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        return state.startswith(_TRANSIENT_SQLSTATE_PREFIXES)
    # InternalClientError: a pooled connection left in a broken protocol state by a dropped server
    # ("cannot switch to state ..."): a fresh connection succeeds.
    return isinstance(
        exc,
        OSError
        | TimeoutError
        | ConnectionError
        | socket.gaierror
        | asyncpg.InterfaceError
        | asyncpg.InternalClientError
        | asyncpg.exceptions.ConnectionDoesNotExistError,
    )


@contextlib.contextmanager
def wrap_db_errors() -> Iterator[None]:
    """Re-raise driver and socket errors as Transient/PermanentDatabaseError.

    The message of the new error is safe to show a client (it can reach API answers and dead letters):
    the driver's own text, which may quote input or name tables, stays on the cause for the logs.
    """
    try:
        yield
    except (TransientDatabaseError, PermanentDatabaseError):
        raise
    except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError, TimeoutError) as exc:
        state = getattr(exc, "sqlstate", None)
        suffix = f" (SQLSTATE {state})" if isinstance(state, str) else ""
        if is_transient(exc):
            raise TransientDatabaseError(f"database unavailable{suffix}") from exc
        error = PermanentDatabaseError(f"the database rejected the operation{suffix}")
        error.constraint = getattr(exc, "constraint_name", None)
        raise error from exc
