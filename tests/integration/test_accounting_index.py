"""The delivery accounting of one tenant (the console's subscriptions page, issue 34 item 7) reads that tenant's
deliveries only: on a table holding two tenants' deliveries, PostgreSQL's plan for the named query
(delivery.sql `accounting`) reaches them through an index on the subscription (migration 0032), not by
scanning every tenant's rows."""

from __future__ import annotations

import json
from typing import Any

from nexus.store.database import Database
from nexus.store.queries import query

ROWS = {"acme": 2_000, "globex": 30_000}  # per subscription; acme's view must not pay for globex's


def scans_of(plan: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan that reads `relation`."""
    found = [plan] if plan.get("Relation Name") == relation else []
    for child in plan.get("Plans", ()):
        found += scans_of(child, relation)
    return found


async def test_one_tenants_accounting_reads_only_its_own_deliveries(db: Database) -> None:
    """With 66,000 deliveries of two tenants' six subscriptions, the generic plan of acme's accounting reads
    deliveries through an index on the subscription and touches acme's 6,000 rows only (no sequential scan of
    globex's), and its counts are right."""
    async with db.pool.acquire() as conn:
        await conn.execute("SET session_replication_role = replica")  # the rows alone: no outbox behind them
        await conn.execute(
            "INSERT INTO subscriptions (name, url, secret, tenant_id) SELECT 's-' || t || '-' || i, "
            "'http://127.0.0.1:9/hook', 'secret', t FROM unnest($1::text[]) AS t, generate_series(1, 3) AS i",
            list(ROWS),
        )
        await conn.execute(
            "INSERT INTO deliveries (outbox_id, subscription_id, tenant_id, order_id, position, state) "
            "SELECT gen_random_uuid(), s.id, s.tenant_id, 'o-' || g, 1, "
            "(ARRAY['delivered', 'dead', 'pending'])[1 + g % 3] "
            "FROM subscriptions AS s, generate_series(1, (($1::jsonb) ->> s.tenant_id)::int) AS g",
            json.dumps(ROWS),
        )
        await conn.execute("SET session_replication_role = origin")
        await conn.execute("VACUUM ANALYZE deliveries")
        await conn.execute("VACUUM ANALYZE subscriptions")
        sql = query("delivery.sql", "accounting").strip().rstrip(";")
        await conn.execute(f"PREPARE accounting(text) AS {sql}")
        await conn.execute("SET plan_cache_mode = force_generic_plan")  # what a pooled statement runs
        explained = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE accounting('acme')")
        counts = await conn.fetch("EXECUTE accounting('acme')")
    scans = scans_of(json.loads(explained)[0]["Plan"], "deliveries")
    assert scans and all(s["Node Type"] != "Seq Scan" for s in scans), [s["Node Type"] for s in scans]
    assert sum(s["Actual Rows"] * s["Actual Loops"] for s in scans) == 3 * ROWS["acme"]
    assert [(r["total"], r["delivered"] + r["dead"] + r["pending"]) for r in counts] == [(ROWS["acme"],) * 2] * 3
