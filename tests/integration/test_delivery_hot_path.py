"""The delivery hot path's cheaper round trips keep their guarantees.

* `finish` and `promote_heads` find their rows through the primary key on an analyzed table of any size
  (they once scanned the whole table per batch while it was small enough for the planner to prefer it);
* a pooled connection goes back without asyncpg's reset round trip, and still without an open transaction;
* the claimer's cached list of subscriptions never lets a claim through a breaker that opened since.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from nexus.core.breaker import Breaker, BreakerConfig, BreakerState
from nexus.delivery.breakers import BreakerReport, write_breaker
from nexus.delivery.bulkheads import BulkheadConfig, Bulkheads
from nexus.delivery.claims import Claimer
from nexus.delivery.subscriptions import ensure_default_subscription
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from tests.integration.test_delivery import SECRET, submit_plans


def _scans(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """(node type, relation) of every node of a plan that reads a table."""
    own = [(plan["Node Type"], plan["Relation Name"])] if "Relation Name" in plan else []
    return own + [scan for child in plan.get("Plans", []) for scan in _scans(child)]


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
async def test_finish_and_promote_never_scan_the_deliveries_table(
    db: Database, settings: Settings, plan_cache_mode: str
) -> None:
    """On an analyzed table of 2,000 deliveries, recording 64 results and promoting their successors
    reads `deliveries` only through indexes, with the batch's values known or not (prepared plans)."""
    s = settings.replace(webhook_url="http://127.0.0.1:9/hook", webhook_secret=SECRET)
    await ensure_default_subscription(db, s)
    await submit_plans(db, 400)
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute("ANALYZE deliveries")
        await conn.execute(f"SET LOCAL plan_cache_mode = {plan_cache_mode}")
        claimed = await conn.fetch(query("delivery.sql", "claim"), "me", 60.0, 64, 1, False)
        assert len(claimed) == 64
        n = len(claimed)
        finish = await conn.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + query("delivery.sql", "finish"),
            "me", [r["outbox_id"] for r in claimed], [1] * n, ["delivered"] * n, [1] * n, [1] * n, [None] * n,
            [200] * n, [None] * n, [dt.datetime.now(dt.UTC)] * n, [None] * n, [None] * n, [False] * n,
        )  # fmt: skip
        promote = await conn.fetchval(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + query("delivery.sql", "promote_heads"),
            [1] * n, [r["order_id"] for r in claimed], [r["tenant_id"] for r in claimed],
        )  # fmt: skip
        heads = await conn.fetchval("SELECT count(*) FROM deliveries WHERE head AND state = 'pending'")
    for explained in (finish, promote):
        plan = json.loads(explained)[0]["Plan"]
        assert ("Seq Scan", "deliveries") not in _scans(plan), plan
    assert heads == 400  # every order still has exactly one head: its next notification


async def test_a_released_connection_skips_the_reset_round_trip_but_not_the_rollback(db: Database) -> None:
    """Releasing a pooled connection sends no reset statements; a transaction left open is rolled back."""
    seen: list[str] = []
    async with db.pool.acquire() as conn:
        conn.add_query_logger(lambda record: seen.append(record.query))
        await conn.execute("CREATE TEMP TABLE IF NOT EXISTS t_release (x int)")
        await conn.execute("BEGIN")
        await conn.execute("INSERT INTO t_release VALUES (1)")
        raw = conn._con  # type: ignore[attr-defined]  # the connection behind the pool's proxy
    assert not any("RESET ALL" in q or "pg_advisory_unlock_all" in q for q in seen), seen
    assert not raw.is_in_transaction()
    async with db.pool.acquire() as conn:
        if await conn.fetchval("SELECT to_regclass('pg_temp.t_release') IS NOT NULL"):
            assert await conn.fetchval("SELECT count(*) FROM t_release") == 0


async def test_a_cached_subscription_list_still_honours_breaker_changes(db: Database, settings: Settings) -> None:
    """With the list of claimable subscriptions cached for a minute: a breaker this instance saw close is
    claimed from at once, and one opened meanwhile (by another instance) stops the claims at once."""
    s = settings.replace(webhook_url="http://127.0.0.1:9/hook", webhook_secret=SECRET)
    await ensure_default_subscription(db, s)
    await submit_plans(db, 3)
    report = BreakerReport(10)
    claimer = Claimer(db, "me", 60.0, BreakerConfig(threshold=5, cooldown_s=30, probe_ttl_s=60), report, 60.0)
    heads = Bulkheads(BulkheadConfig.of(16, None, None))
    now = dt.datetime.now(dt.UTC)
    opened = Breaker(BreakerState.OPEN, 5, now, now + dt.timedelta(seconds=30))
    async with db.pool.acquire() as conn:
        await conn.execute("INSERT INTO circuit_breakers (subscription_id) VALUES (1) ON CONFLICT DO NOTHING")
        await write_breaker(conn, 1, opened)
    assert await claimer.claim(10, heads) == []  # the list, now cached, is empty
    async with db.pool.acquire() as conn:
        await write_breaker(conn, 1, Breaker())
    report.transitioned(1, opened, Breaker())  # closed (say, by this instance's probe): read again at once
    assert len(await claimer.claim(1, heads)) == 1
    async with db.pool.acquire() as conn:
        await write_breaker(conn, 1, opened)  # opened by another instance: the cached list still names it
    assert await claimer.claim(10, heads) == []
