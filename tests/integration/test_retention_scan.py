"""The remover's scan on a real PostgreSQL is bounded per tenant: a tenant whose own period is longer than the
default costs a pass nothing while its finished orders are not yet due (docs/retention.md)."""

from __future__ import annotations

import json
from typing import Any

from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.retention.remover import CLOSED_SAGAS, RetentionRemover
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from tests.integration.test_retention import finished_orders

LONG_ORDERS = 20_000

_COPIES = """
INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, created_at, updated_at,
                    process, process_version, facts, finished_at)
SELECT 'long-' || i, 'long', 'long-' || i || '-plan', o.status, o.last_seq, o.tombstone, 0, o.created_at,
       o.updated_at, o.process, o.process_version, o.facts, o.finished_at
FROM orders AS o, generate_series(1, $2::int) AS i
WHERE o.order_id = $1
"""


def orders_rows_read(plan: dict[str, Any]) -> int:
    """Rows the plan's scans of `orders` read: returned plus removed by a filter or a recheck, times their loops."""
    read = 0
    if plan.get("Relation Name") == "orders":
        removed = plan.get("Rows Removed by Filter", 0) + plan.get("Rows Removed by Index Recheck", 0)
        read += (plan["Actual Rows"] + removed) * plan["Actual Loops"]
    return read + sum(orders_rows_read(p) for p in plan.get("Plans", []))


async def explained_rows(db: Database, sql: str, *args: Any, generic: bool = False) -> int:
    """EXPLAIN (ANALYZE) of `sql` in a transaction rolled back (its locks go): the rows it read from `orders`;
    `generic`: of the plan without the parameters' values (what a prepared statement runs after five passes)."""
    async with db.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            if generic:
                await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                await conn.execute(f"PREPARE scanned AS {sql}")
                literals = [await conn.fetchval("SELECT quote_nullable($1::text[])", a) if isinstance(a, list)
                            else str(int(a)) for a in args]  # fmt: skip
                sql, args = f"EXECUTE scanned ({', '.join(literals)})", ()
            raw = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
        finally:
            await tx.rollback()
            if generic:
                await conn.execute("DEALLOCATE scanned")
    return orders_rows_read((json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"])


async def test_a_long_tenant_period_costs_a_pass_nothing_until_its_orders_are_due(
    db: Database, settings: Settings
) -> None:
    """With 20,000 finished orders of a tenant whose period is long and 3 due orders of another, one pass removes
    the 3 and the due and gauge queries read far fewer rows of orders than that tenant holds."""
    gateway = Gateway(db)
    due = await finished_orders(db, gateway, "o-scan-due", 3)
    await db.execute(_COPIES, due[0], LONG_ORDERS)
    await db.execute(
        "INSERT INTO tenant_limits (tenant_id, max_order_amount, retention_s) VALUES ('long', 1000, 864000)"
    )
    await db.execute("ANALYZE orders")
    worker = RetentionRemover(db, settings.replace(retention_s=3600), builtin_catalog())
    pairs = worker.terminal.args()
    due_sql = query("retention.sql", "due_orders")
    assert await explained_rows(db, due_sql, *pairs, 200, 3600, CLOSED_SAGAS) < LONG_ORDERS // 20
    assert await explained_rows(db, due_sql, *pairs, 200, 3600, CLOSED_SAGAS, generic=True) < LONG_ORDERS // 20
    gauges_sql = query("retention.sql", "oldest_finished")
    assert await explained_rows(db, gauges_sql, *pairs, 3600) < LONG_ORDERS // 20
    assert await explained_rows(db, gauges_sql, *pairs, 3600, generic=True) < LONG_ORDERS // 20
    oldest, overdue = await worker.publish()
    assert 7100 < oldest < 7300 and 3500 < overdue < 3700
    assert (await worker.remove_due()).orders == 3
    assert await db.fetchval("SELECT count(*) FROM orders WHERE order_id = ANY($1::text[])", due) == 0
    assert await db.fetchval("SELECT count(*) FROM orders WHERE tenant_id = 'long'") == LONG_ORDERS
    assert (await worker.remove_due()).orders == 0
    assert (await worker.publish())[1] == 0.0
