"""Migration 0027 on a real PostgreSQL: an order records when it finished (`finished_at`), the live-orders
count follows it exactly, and a step's update of its order is a HOT update again (no index on a column every
step changes)."""

from __future__ import annotations

import json
from typing import Any

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.store.database import Database
from tests.factories import abort_json, plan_json, step_json


async def submit(gateway: Gateway, events: list[dict[str, Any]]) -> None:
    await gateway.submit([Incoming.parse(json.dumps(e)) for e in events])


async def test_finished_at_is_set_when_an_order_finishes_and_the_live_count_follows(db: Database) -> None:
    """A completed order, an aborted one and one inserted finished (aborted before its first step) get
    `finished_at`, a live one does not, and the tenant's counted live_orders equals its unfinished orders
    after each change."""
    gateway = Gateway(db)
    live_count = (
        "SELECT (SELECT coalesce(sum(used), 0) FROM tenant_usage WHERE tenant_id = 'default'"
        " AND quota = 'live_orders')::int AS counted,"
        " (SELECT count(*) FROM orders WHERE tenant_id = 'default' AND finished_at IS NULL)::int AS unfinished"
    )
    await submit(gateway, [step_json("live", "p-live", 1), step_json("aborted", "p-aborted", 1)])
    await submit(gateway, [abort_json("never", "p-never", 0)])
    assert dict(await db.fetchrow(live_count) or {}) == {"counted": 2, "unfinished": 2}
    await submit(gateway, plan_json("done", "p-done", 5))
    await submit(gateway, [abort_json("aborted", "p-aborted", 1)])
    rows = await db.fetch("SELECT order_id, status, finished_at IS NOT NULL AS finished FROM orders ORDER BY 1")
    assert [(r["order_id"], r["status"], r["finished"]) for r in rows] == [
        ("aborted", "aborted", True),
        ("done", "completed", True),
        ("live", "created", False),
        ("never", "aborted", True),
    ]
    assert dict(await db.fetchrow(live_count) or {}) == {"counted": 1, "unfinished": 1}
    await submit(gateway, [step_json("live", "p-live", 2)])
    assert dict(await db.fetchrow(live_count) or {}) == {"counted": 1, "unfinished": 1}


async def test_a_steps_update_of_its_order_is_hot(db: Database) -> None:
    """Updating what a step changes (status, last_seq, facts, updated_at) of a live order is a heap-only
    update: no index covers those columns, finished_at is not written."""
    await submit(Gateway(db), [step_json("o-1", "p-1", 1)])
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "UPDATE orders SET status = 'inventory_validated', last_seq = last_seq + 1, facts = facts,"
            " updated_at = now() WHERE order_id = 'o-1'"
        )
        hot = await conn.fetchval("SELECT pg_stat_get_xact_tuples_hot_updated('orders'::regclass)")
    assert hot == 1
