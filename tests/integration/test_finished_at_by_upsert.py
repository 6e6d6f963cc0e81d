"""Migration 0039 on a real PostgreSQL: the group commit's upsert (gateway.sql `write_batch`) writes its orders'
`finished_at` itself, without a call of the row trigger per step, and the live-orders count stays exact; any
other statement, even later in the same transaction, still gets `finished_at` from the trigger."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import asyncpg

from nexus.store.database import Database
from nexus.store.queries import query

TRIGGER = "'nexus_order_set_finished_at()'::regprocedure"
LIVE = "SELECT coalesce(sum(used), 0) FROM tenant_usage WHERE tenant_id = 'acme' AND quota = 'live_orders'"
FINISHED = "SELECT order_id, finished_at FROM orders WHERE finished_at IS NOT NULL ORDER BY 1"


async def write(conn: asyncpg.Connection, *orders: tuple[str, str, int, str]) -> None:
    """Upsert orders (order, status, last_seq, process) of tenant acme with write_batch, as the gateway does."""
    rows: list[list[Any]] = [
        [o, "acme", f"p-{o}", status, seq, False, seq, process, 2, "{}", "", None] for o, status, seq, process in orders
    ]
    await conn.execute(
        query("gateway.sql", "write_batch"), json.dumps(rows), "[]", "[]", datetime.now(UTC), [], [], "[]"
    )


async def test_the_upsert_stamps_finished_at_without_the_row_trigger(db: Database) -> None:
    """Orders completed, aborted, inserted finished and of an unknown process get `finished_at` from write_batch
    with no call of `nexus_order_set_finished_at`; a finished order keeps its first; live_orders counts the rest."""
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL track_functions = 'all'")
        await write(conn, ("a", "created", 1, "order"), ("b", "created", 1, "order"), ("c", "created", 1, "order"))
        await write(conn, ("d", "aborted", 1, "order"), ("e", "completed", 1, "nowhere"), ("f", "shipped", 1, "x"))
        await write(conn, ("a", "completed", 5, "order"), ("b", "aborted", 2, "order"), ("c", "shipped", 4, "order"))
        first = dict(await conn.fetch(FINISHED))
        await write(conn, ("a", "completed", 6, "order"))
        assert dict(await conn.fetch(FINISHED)) == first
        assert sorted(first) == ["a", "b", "d", "e"]
        assert await conn.fetchval(LIVE) == 2  # c and f
        assert not await conn.fetchval(f"SELECT pg_stat_get_xact_function_calls({TRIGGER})")


async def test_another_statement_of_the_same_transaction_still_gets_finished_at(db: Database) -> None:
    """After write_batch, a plain UPDATE of an order's status in the same transaction is stamped (and counted out
    of live_orders) by the trigger: the upsert's skip covers its own statement only."""
    async with db.pool.acquire() as conn, conn.transaction():
        await write(conn, ("a", "created", 1, "order"), ("b", "created", 1, "order"))
        await conn.execute("UPDATE orders SET status = 'completed' WHERE order_id = 'a'")
        assert [r["order_id"] for r in await conn.fetch(FINISHED)] == ["a"]
        assert await conn.fetchval(LIVE) == 1
