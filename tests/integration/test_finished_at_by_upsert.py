"""Migrations 0039 and 0043 on a real PostgreSQL: the group commit's upsert (gateway.sql `write_batch`) writes its
orders' `finished_at` from each row's `finished` flag (the fold's decision, core/decide/finished.py), without
reading any process, an order finished keeping its first; no trigger decides it for any other statement."""

from __future__ import annotations

import asyncpg

from nexus.batch_rows import read_batch, write_rows
from nexus.core.decide.rows import OrderRow
from nexus.store.database import Database

LIVE = "SELECT coalesce(sum(used), 0) FROM tenant_usage WHERE tenant_id = 'acme' AND quota = 'live_orders'"
FINISHED = "SELECT order_id, finished_at FROM orders WHERE finished_at IS NOT NULL ORDER BY 1"
PROCESS_SCANS = "SELECT seq_scan + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables WHERE relname = 'processes'"


async def write(conn: asyncpg.Connection, *orders: tuple[str, str, int, bool]) -> None:
    """Read and upsert orders (order, status, last_seq, finished) of tenant acme with `read_batch` and `write_rows`
    (gateway.sql `write_batch`), as the gateway does."""
    keys = [("acme", o) for o, _, _, _ in orders]
    reads = await read_batch(conn, keys, validated=False)
    rows = [OrderRow(o, "acme", f"p-{o}", status, seq, False, seq, "order", 2, "{}", "", None, finished)
            for o, status, seq, finished in orders]  # fmt: skip
    await write_rows(conn, live=reads.live, read=keys, orders=rows)


async def test_the_upsert_writes_finished_at_from_the_rows_flag_and_reads_no_process(db: Database) -> None:
    """Orders written finished (inserted so or updated to it) get `finished_at`, whatever their status says; a
    finished order keeps its first; live_orders counts the rest; no statement read `processes`."""
    async with db.pool.acquire() as conn, conn.transaction():
        await write(conn, ("a", "created", 1, False), ("b", "created", 1, False), ("c", "created", 1, False))
        await write(conn, ("d", "aborted", 1, True), ("e", "closed", 1, True), ("f", "completed", 1, False))
        await write(conn, ("a", "completed", 5, True), ("b", "aborted", 2, True), ("c", "shipped", 4, False))
        first = dict(await conn.fetch(FINISHED))
        await write(conn, ("a", "completed", 6, True))
        assert dict(await conn.fetch(FINISHED)) == first
        assert sorted(first) == ["a", "b", "d", "e"]
        assert await conn.fetchval(LIVE) == 2  # c and f
        assert await conn.fetchval(PROCESS_SCANS) == 0


async def test_a_status_written_outside_the_fold_is_not_finished_by_sql(db: Database) -> None:
    """A plain UPDATE of an order's status (a person at psql) leaves finished_at and live_orders as they were:
    the trigger that decided it in SQL is gone (migration 0043), only the fold decides."""
    async with db.pool.acquire() as conn, conn.transaction():
        await write(conn, ("a", "created", 1, False), ("b", "created", 1, False))
        await conn.execute("UPDATE orders SET status = 'completed', tombstone = true WHERE order_id = 'a'")
        assert await conn.fetch(FINISHED) == []
        assert await conn.fetchval(LIVE) == 2
