"""The retention bench's generated orders (nexus_lab.bench.retained): the rows a real finished five-step order leaves,
every index and constraint back afterwards, the quota counters untouched, and the remover takes them whole."""

from __future__ import annotations

import asyncpg

from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.retention.remover import RetentionRemover
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.bench import retained
from tests.factories import step_json
from tests.integration.test_retention import finished_orders, rows_of, submit, subscribe

CATALOG = """
SELECT c.relname,
       array_agg(pg_get_indexdef(i.indexrelid) ORDER BY i.indexrelid::regclass::text),
       (SELECT array_agg(conname || pg_get_constraintdef(k.oid) || k.convalidated ORDER BY k.conname)
        FROM pg_constraint k WHERE k.conrelid = c.oid OR k.confrelid = c.oid)
FROM pg_class c LEFT JOIN pg_index i ON i.indrelid = c.oid
WHERE c.relname = ANY($1::text[]) GROUP BY c.oid, c.relname ORDER BY 1
"""


async def test_a_generated_order_has_the_rows_of_a_real_one(db: Database, settings: Settings) -> None:
    """A generated order has, table by table, as many rows as a real delivered five-step order, the four tables'
    indexes and constraints are as before, the live-orders quota counter is unchanged, and the remover takes
    every generated order with all its rows once due."""
    say: list[str] = []
    await subscribe(db)
    [real] = await finished_orders(db, Gateway(db), "o-gen-real", 1)
    await db.execute("UPDATE deliveries SET state = 'delivered', delivered_at = now()")
    conn = await asyncpg.connect(settings.database_url)
    try:
        before = await conn.fetch(CATALOG, list(retained.TABLES))
    finally:
        await conn.close()
    usage = await db.fetchval("SELECT coalesce(sum(used), 0) FROM tenant_usage WHERE quota = 'live_orders'")
    await retained.generate(settings.database_url, 1, 30, say.append, chunk=20)
    assert any("decision_log: orders up to 30" in line for line in say)
    conn = await asyncpg.connect(settings.database_url)
    try:
        assert await conn.fetch(CATALOG, list(retained.TABLES)) == before
    finally:
        await conn.close()
    real_rows = await rows_of(db, real) | {"log": await log_rows(db, real)}
    assert await rows_of(db, "ret-7") | {"log": await log_rows(db, "ret-7")} == real_rows
    assert real_rows["outbox"] == real_rows["deliveries"] == real_rows["log"] == 5
    assert await db.fetchval("SELECT coalesce(sum(used), 0) FROM tenant_usage WHERE quota = 'live_orders'") == usage
    outcomes = await submit(Gateway(db), [step_json("ret-3", "ret-3-plan", 3)])
    assert outcomes[0].decision.value == "DUPLICATE"  # the generated order answers as a finished one
    remover = RetentionRemover(db, settings.replace(retention_s=86400, retention_batch=200), builtin_catalog())
    assert (await remover.remove_due()).orders == 30  # the real one finished two hours ago: not due
    assert set((await rows_of(db, "ret-30")).values()) == {0}


async def log_rows(db: Database, order: str) -> int:
    """Decision-log rows of `order`."""
    return int(await db.fetchval("SELECT count(*) FROM decision_log WHERE order_id = $1", order))
