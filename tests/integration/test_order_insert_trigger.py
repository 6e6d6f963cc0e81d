"""Migrations 0028, 0038 and 0043 on a real PostgreSQL: inserting orders costs no scan of every order and reads no
process (the insert trigger counts the inserted orders from the transition table, each by its own finished_at),
and the live-orders count stays exact for orders inserted finished and not."""

from __future__ import annotations

import asyncpg

from nexus.store.database import Database

UPSERT = """
INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, process, process_version,
                    facts, finished_at)
SELECT 'o' || i, 'acme', 'p' || i, $2, 1, false, 1, 'order', 1, '{}', CASE WHEN $4 THEN now() END
FROM generate_series($1::int, $1 + $3 - 1) AS i
ON CONFLICT (tenant_id, order_id) DO UPDATE SET status = EXCLUDED.status, updated_at = now()
"""
SCANS = "SELECT seq_scan + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables WHERE relname = $1"


async def upsert(conn: asyncpg.Connection, first: int, status: str, n: int = 1, *, finished: bool = False) -> int:
    """Upsert `n` orders from number `first` with `status` (inserted `finished` or not); the sequential scans of
    orders it cost."""
    before = await conn.fetchval("SELECT pg_stat_get_xact_numscans('orders'::regclass)")
    await conn.execute(UPSERT, first, status, n, finished)
    return int(await conn.fetchval("SELECT pg_stat_get_xact_numscans('orders'::regclass)")) - int(before)


async def test_inserting_an_order_scans_no_orders(db: Database) -> None:
    """An upsert inserting one live order beside a thousand stored ones scans no order, even in a session whose
    trigger plan was made while orders was empty."""
    async with db.pool.acquire() as conn, conn.transaction():
        await upsert(conn, 0, "created")  # the trigger's statements are planned now, on an empty table
        await upsert(conn, 1, "created", 1000)
        assert await upsert(conn, 2000, "created") == 0
        assert await upsert(conn, 2001, "completed", finished=True) == 0


async def test_orders_inserted_finished_and_not_are_counted_exactly(db: Database) -> None:
    """Orders inserted without finished_at count as live, those inserted with it do not, whatever their status."""
    async with db.pool.acquire() as conn:
        await upsert(conn, 0, "created", 3)
        await upsert(conn, 10, "completed", 2, finished=True)
        await upsert(conn, 20, "aborted", finished=True)
        await upsert(conn, 30, "completed")  # not finished by the fold: SQL does not decide it
        rows = await conn.fetch("SELECT order_id FROM orders WHERE finished_at IS NOT NULL ORDER BY 1")
        assert [r["order_id"] for r in rows] == ["o10", "o11", "o20"]
        counted = await conn.fetchval(
            "SELECT coalesce(sum(used), 0) FROM tenant_usage WHERE tenant_id = 'acme' AND quota = 'live_orders'"
        )
        assert counted == 4


async def test_inserting_orders_reads_no_process(db: Database) -> None:
    """The insert trigger no longer joins each inserted order's process for its terminal states (migration 0043):
    inserting orders, finished or not, scans `processes` not once."""
    async with db.pool.acquire() as conn, conn.transaction():
        await upsert(conn, 0, "created", 10)
        await upsert(conn, 10, "completed", 2)
        assert await conn.fetchval(SCANS, "processes") == 0
