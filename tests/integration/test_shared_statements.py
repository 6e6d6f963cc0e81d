"""The SQL functions of migration 0031 on a real PostgreSQL: an order's rows of one table deleted by (tenant,
order) pair, and the decision log's chain heads, as retention.sql and audit.sql call them."""

from __future__ import annotations

from nexus.store.database import Database
from nexus.store.queries import query


async def test_delete_order_rows_takes_only_the_named_pairs_and_counts_them(db: Database) -> None:
    """`delete_order_rows` deletes the rows of exactly the (tenant, order) pairs given and returns how many."""
    for tenant, order in (("t1", "o1"), ("t2", "o1"), ("t1", "o2"), ("t1", "o3")):
        await db.execute(
            "INSERT INTO plans (tenant_id, order_id, plan_id, process) VALUES ($1, $2, 'p', 'order')", tenant, order
        )
    removed = await db.fetchval(query("retention.sql", "delete_order_rows"), ["t1", "t1"], ["o1", "o3"], "plans")
    assert removed == 2
    left = await db.fetch("SELECT tenant_id, order_id FROM plans ORDER BY tenant_id, order_id")
    assert [(r["tenant_id"], r["order_id"]) for r in left] == [("t1", "o2"), ("t2", "o1")]


async def test_read_heads_gives_each_chains_last_record_and_nothing_for_an_empty_chain(db: Database) -> None:
    """`read_heads` answers the last (position, hash) of each named chain, per tenant; a chain without records
    has no row."""
    for tenant, position in (("t1", 1), ("t1", 2), ("t2", 1)):
        await db.execute(
            "INSERT INTO decision_log (tenant_id, order_id, position, at, decision, prev_hash, hash)"
            " VALUES ($1, 'o1', $2, now(), 'APPLIED', $3, $4)",
            tenant,
            position,
            bytes(32),
            bytes([position]) * 32,
        )
    rows = await db.fetch(query("audit.sql", "read_heads"), ["t1", "t2", "t3"], ["o1", "o1", "o1"])
    heads = {r["tenant_id"]: (r["position"], r["hash"]) for r in rows}
    assert heads == {"t1": (2, bytes([2]) * 32), "t2": (1, bytes([1]) * 32)}
