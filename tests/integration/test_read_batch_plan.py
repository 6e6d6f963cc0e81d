"""The batch read (`gateway.sql` read_batch) reads each order by its key, whatever the plan kept for it: a plan made
while orders looked empty still reads no other order once the table has grown (no scan of every order)."""

from __future__ import annotations

from nexus.batch_rows import read_batch
from nexus.store.database import Database

INSERT = """
INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, process, process_version,
                    facts)
SELECT 'o' || i, 'acme', 'p' || i, 'created', 1, false, 1, 'order', 1, '{}' FROM generate_series(1, $1::int) AS i
"""
SCANS = "SELECT pg_stat_get_xact_numscans('orders'::regclass)"


async def test_a_plan_made_on_an_empty_table_reads_orders_by_key(db: Database) -> None:
    """The read's generic plan is made while orders is empty; after 2,000 orders arrive (no ANALYZE since), a read
    of two of them scans the table sequentially not once, and finds both."""
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for _ in range(3):  # the prepared statement's plan, kept for the connection
            await read_batch(conn, [("acme", "o1")], validated=True)
        await conn.execute(INSERT, 2000)
        before = await conn.fetchval(SCANS)
        reads = await read_batch(conn, [("acme", "o7"), ("acme", "o1500")], validated=True)
        assert await conn.fetchval(SCANS) == before
        assert sorted(state.order_id for state in reads.states.values()) == ["o1500", "o7"]
