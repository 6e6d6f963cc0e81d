"""Numbered migrations (``migrations/NNNN_name.sql``), applied in order and recorded in a table."""

from __future__ import annotations

import dataclasses
import re
from importlib import resources

import asyncpg

from nexus.store.errors import wrap_db_errors

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")
# A fixed key so that two processes starting at once do not both migrate.
_MIGRATION_LOCK = 0x6E657875  # "nexu"


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    found = []
    for entry in resources.files("nexus.store").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


async def apply_migrations(conn: asyncpg.Connection) -> list[Migration]:
    """Apply the migrations not yet recorded; return those applied. Safe to run concurrently and again."""
    applied: list[Migration] = []
    with wrap_db_errors():
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            for migration in migrations():
                if migration.version in done:
                    continue
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
                applied.append(migration)
    return applied
