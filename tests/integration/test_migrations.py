"""Migrations apply on an empty database, are recorded, and applying them again changes nothing."""

from __future__ import annotations

import uuid

import asyncpg

from nexus.store.migrate import apply_migrations, migrations
from tests.conftest import PostgresForTests


async def _schema(conn: asyncpg.Connection) -> list[tuple[str, str, str]]:
    rows = await conn.fetch(
        "SELECT table_name, column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = 'public' ORDER BY table_name, column_name"
    )
    return [(r["table_name"], r["column_name"], r["data_type"]) for r in rows]


async def test_migrations_apply_on_empty_database_and_are_idempotent(pg: PostgresForTests) -> None:
    """All migrations apply to an empty database in order, and a second run applies none."""
    name = f"m_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg.admin_url)
    await admin.execute(f"CREATE DATABASE {name}")
    await admin.close()
    conn = await asyncpg.connect(pg.url(name))
    try:
        first = await apply_migrations(conn)
        assert [m.version for m in first] == [m.version for m in migrations()]
        schema = await _schema(conn)
        tables = {t for t, _, _ in schema}
        assert {"orders", "pending_events", "outbox", "dead_letters", "schema_migrations"} <= tables
        again = await apply_migrations(conn)
        assert again == []
        assert await _schema(conn) == schema
        recorded = await conn.fetchval("SELECT count(*) FROM schema_migrations")
        assert recorded == len(migrations())
    finally:
        await conn.close()
