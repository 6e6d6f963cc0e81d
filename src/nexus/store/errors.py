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
    """Re-raise driver and socket errors as Transient/PermanentDatabaseError."""
    try:
        yield
    except (TransientDatabaseError, PermanentDatabaseError):
        raise
    except (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError, TimeoutError) as exc:
        if is_transient(exc):
            raise TransientDatabaseError(f"database unavailable: {type(exc).__name__}: {exc}") from exc
        raise PermanentDatabaseError(f"database rejected the operation: {type(exc).__name__}: {exc}") from exc
