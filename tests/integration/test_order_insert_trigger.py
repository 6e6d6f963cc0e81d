"""Migrations 0028 and 0038 on a real PostgreSQL: inserting orders costs no scan of every order (the insert trigger
picks the orders inserted finished from the transition table and updates only those, by key) and no function call
per order, and the live-orders count and `finished_at` stay exact for orders inserted finished and not."""

from __future__ import annotations

import asyncpg

from nexus.store.database import Database

UPSERT = """
INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, process, process_version,
                    facts)
SELECT 'o' || i, 'acme', 'p' || i, $2, 1, false, 1, $4, 1, '{}' FROM generate_series($1::int, $1 + $3 - 1) AS i
ON CONFLICT (tenant_id, order_id) DO UPDATE SET status = EXCLUDED.status, updated_at = now()
"""


async def upsert(conn: asyncpg.Connection, first: int, status: str, n: int = 1, process: str = "order") -> int:
    """Upsert `n` orders of `process` from number `first` with `status`; the sequential scans of orders it cost."""
    before = await conn.fetchval("SELECT pg_stat_get_xact_numscans('orders'::regclass)")
    await conn.execute(UPSERT, first, status, n, process)
    return int(await conn.fetchval("SELECT pg_stat_get_xact_numscans('orders'::regclass)")) - int(before)


async def test_inserting_an_order_scans_no_orders(db: Database) -> None:
    """An upsert inserting one live order beside a thousand stored ones scans no order, even in a session whose
    trigger plan was made while orders was empty."""
    async with db.pool.acquire() as conn, conn.transaction():
        await upsert(conn, 0, "created")  # the trigger's statements are planned now, on an empty table
        await upsert(conn, 1, "created", 1000)
        assert await upsert(conn, 2000, "created") == 0
        assert await upsert(conn, 2001, "completed") == 0  # inserted finished: updated by its key


async def test_orders_inserted_finished_and_not_are_counted_exactly(db: Database) -> None:
    """Orders inserted live count as live; those inserted finished get `finished_at` and are not counted."""
    async with db.pool.acquire() as conn:
        await upsert(conn, 0, "created", 3)
        await upsert(conn, 10, "completed", 2)
        await upsert(conn, 20, "aborted")
        rows = await conn.fetch("SELECT order_id FROM orders WHERE finished_at IS NOT NULL ORDER BY 1")
        assert [r["order_id"] for r in rows] == ["o10", "o11", "o20"]
        counted = await conn.fetchval(
            "SELECT coalesce(sum(used), 0) FROM tenant_usage WHERE tenant_id = 'acme' AND quota = 'live_orders'"
        )
        assert counted == 3


async def test_inserting_orders_calls_no_function_per_order(db: Database) -> None:
    """The insert trigger tells the orders inserted finished in its own statement: `nexus_order_finished` (a SQL
    function PostgreSQL cannot inline) is not called once per inserted order."""
    finished = "'nexus_order_finished(text, integer, text, boolean)'::regprocedure"
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL track_functions = 'all'")
        await upsert(conn, 0, "created", 10)
        await upsert(conn, 10, "completed", 2)
        assert not await conn.fetchval(f"SELECT pg_stat_get_xact_function_calls({finished})")


async def test_an_order_of_an_unknown_process_is_inserted_finished_only_when_completed(db: Database) -> None:
    """Without its process in the catalog an order is finished as `completed` (as `nexus_order_finished` says)."""
    async with db.pool.acquire() as conn:
        await upsert(conn, 0, "completed", process="nowhere")
        await upsert(conn, 1, "shipped", process="nowhere")
        rows = await conn.fetch("SELECT order_id FROM orders WHERE finished_at IS NOT NULL ORDER BY 1")
        assert [r["order_id"] for r in rows] == ["o0"]
