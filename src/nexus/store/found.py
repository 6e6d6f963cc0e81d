"""A statement that must find its row: the row, or `NotFoundError` (404 NOT_FOUND) saying what is missing."""

from __future__ import annotations

from typing import Any

import asyncpg

from nexus.errors import NotFoundError
from nexus.store.database import Database


async def require_row(db: Database, sql: str, *args: Any, missing: str) -> asyncpg.Record:
    """The one row `sql` returns with `args`; NotFoundError(`missing`) when it returns none."""
    row = await db.fetchrow(sql, *args)
    if row is None:
        raise NotFoundError(missing)
    return row
