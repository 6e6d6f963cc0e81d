"""promote_heads stays driven by the given (subscription, order) pairs, whatever the backlog.

A flush of the dispatcher runs it under the orders' advisory locks and before its results commit: a plan
that joins each pair to the whole backlog once took seconds, longer than a lease, and delivered
notifications were re-claimed and sent again (tests/chaos/test_delivery_processes.py).
"""

from __future__ import annotations

import json
from typing import Any

from nexus.delivery.subscriptions import ensure_default_subscription
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from tests.integration.test_delivery import SECRET, submit_plans


def _loops_over(plan: dict[str, Any], alias: str) -> int:
    """Total executions of the plan nodes that read `deliveries` under `alias`."""
    own = plan.get("Actual Loops", 0) if plan.get("Alias") == alias else 0
    return own + sum(_loops_over(child, alias) for child in plan.get("Plans", []))


async def test_promote_heads_searches_each_pair_once(db: Database, settings: Settings) -> None:
    """Promoting 50 orders' next heads over a 500-row backlog looks each pair up once and promotes 50 rows."""
    s = settings.replace(webhook_url="http://127.0.0.1:9/hook", webhook_secret=SECRET)
    await ensure_default_subscription(db, s)
    await submit_plans(db, 100)
    async with db.pool.acquire() as conn, conn.transaction():
        ended = await conn.fetch(
            "UPDATE deliveries SET state = 'delivered', head = false, delivered_at = now()"
            " WHERE (tenant_id, order_id) IN (SELECT DISTINCT tenant_id, order_id FROM deliveries"
            " ORDER BY order_id LIMIT 50) AND position = 1"
            " RETURNING subscription_id, order_id, tenant_id"
        )
        assert len(ended) == 50
        before = await conn.fetchval("SELECT count(*) FROM deliveries WHERE head")
        explained = await conn.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + query("delivery.sql", "promote_heads"),
            [r["subscription_id"] for r in ended],
            [r["order_id"] for r in ended],
            [r["tenant_id"] for r in ended],
        )
        after = await conn.fetchval("SELECT count(*) FROM deliveries WHERE head")
    plan = json.loads(explained)[0]["Plan"]
    assert after - before == 50
    assert _loops_over(plan, "p") <= 50, plan
