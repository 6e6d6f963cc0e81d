"""The group commit's statements (migration 0046: `read_batch`, `write_batch`, `delete_pending` and the sweeper's
`read_buffered`, run by functions planned for reads by key) on a real PostgreSQL read each order's rows by key
whatever the tables' statistics say: planned (and their plans kept by the connection's prepared statements) while
the tables held a hundred rows each, analyzed, then grown two hundredfold without an ANALYZE (a tenant's steps
buffered, rejected or held, plans started, notifications delivered, by the thousand between two autovacuum runs),
they scan none of them and read and write exactly what they did before."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import asyncpg

from nexus.batch_rows import pairs
from nexus.core.decide.plan import OrderKey
from nexus.store.database import Database
from nexus.store.queries import query

SCANS = "SELECT relname, seq_scan FROM pg_stat_xact_user_tables WHERE relname = ANY($1::text[])"
TABLES = ["orders", "pending_events", "rejected_events", "removed_orders", "approvals", "plan_steps", "plans"]

# Rows of orders named `prefix || i`, i in 1..$1, in every table read_batch reads besides the decision log.
FILL = [
    "INSERT INTO orders (tenant_id, order_id, plan_id, status, last_seq, process, process_version)"
    " SELECT 'acme', $2 || i, 'p', 'created', 1, 'order', 1 FROM generate_series(1, $1) AS i",
    "INSERT INTO pending_events (tenant_id, order_id, seq_id, event_id, plan_id, envelope)"
    " SELECT 'acme', $2 || i, 3, gen_random_uuid(), 'p', '{}' FROM generate_series(1, $1) AS i",
    "INSERT INTO rejected_events (event_id, order_id, plan_id, tenant_id, event_type, code, message, envelope)"
    " SELECT gen_random_uuid(), $2 || i, 'p', 'acme', 't', 'c', 'm', '{}' FROM generate_series(1, $1) AS i",
    "INSERT INTO removed_orders (tenant_id, order_id, plan_id, process, final_status, tombstone, last_seq,"
    " notifications, delivery_state, delivered, dead, pending, finished_at)"
    " SELECT 'acme', $2 || 'gone' || i, 'p', 'order', 'completed', false, 3, 0, 'delivered', 0, 0, 0, now()"
    " FROM generate_series(1, $1) AS i",
    "INSERT INTO approvals (approval_id, tenant_id, order_id, event_id, plan_id, seq_id, event_type, envelope)"
    " SELECT gen_random_uuid(), 'acme', $2 || i, gen_random_uuid(), 'p', 2, 't', '{}' FROM generate_series(1, $1) AS i",
    "INSERT INTO plan_steps (tenant_id, order_id, event_id, keyed, digest, decision, decided_at, seq_id)"
    " SELECT 'acme', $2 || i, gen_random_uuid(), false, 'd', 'APPLY', now(), 1 FROM generate_series(1, $1) AS i",
    "INSERT INTO plans (tenant_id, order_id, plan_id, process, actor)"
    " SELECT 'acme', $2 || 'planned' || i, 'p', 'order', 'test' FROM generate_series(1, $1) AS i",
]


async def fill(conn: asyncpg.Connection, rows: int, prefix: str) -> None:
    for statement in FILL:
        await conn.execute(statement, rows, prefix)


async def scans(conn: asyncpg.Connection, tables: list[str] = TABLES) -> dict[str, int]:
    return {r["relname"]: r["seq_scan"] for r in await conn.fetch(SCANS, tables)}


async def read(
    conn: asyncpg.Connection, keys: list[OrderKey], numbered: list[OrderKey], event: uuid.UUID
) -> Counter[str]:
    """The kinds of rows `read_batch`'s statement returns, as the group commit runs it (steps validated)."""
    statement = query("gateway.sql", "read_batch")
    rows = await conn.fetch(statement, *pairs(keys), ["acme"], True, *pairs(numbered), [event])
    return Counter(r["kind"] for r in rows)


async def test_the_batch_read_scans_no_table_after_the_tables_grew_past_their_statistics(db: Database) -> None:
    keys = [("acme", f"small{i}") for i in range(1, 85, 6)] + [("acme", "smallgone3")]  # 14 orders and a removed one
    numbered = [("acme", f"small{i}") for i in range(1, 7)] + [("acme", "smallplanned5")]
    async with db.pool.acquire() as conn, conn.transaction():
        await fill(conn, 100, "small")
        event = await conn.fetchval("SELECT event_id FROM plan_steps WHERE order_id = 'small2'")
        for table in TABLES:
            await conn.execute(f"ANALYZE {table}")
        for _ in range(8):  # custom plans, then the generic plan the connection keeps
            first = await read(conn, keys, numbered, event)
            await conn.fetch(query("gateway.sql", "read_buffered"), *pairs(keys))  # the sweeper's read
            await conn.execute(query("gateway.sql", "delete_pending"), ["small1"], [99], ["acme"])  # none such
        await fill(conn, 20_000, "grown")
        before = await scans(conn)
        grown = await read(conn, keys, numbered, event)
        buffered = await conn.fetch(query("gateway.sql", "read_buffered"), *pairs(keys))
        await conn.execute(query("gateway.sql", "delete_pending"), ["small1"], [3], ["acme"])  # applied: deleted
        after = await scans(conn)
        left = await conn.fetchval("SELECT count(*) FROM pending_events WHERE order_id = 'small1'")
    assert {t: after[t] - before[t] for t in TABLES} == dict.fromkeys(TABLES, 0)
    assert len(buffered) == 14 and left == 0
    # exactly the batch's rows, as before the tables grew
    expected = {"order": 14, "pending": 14, "rejected": 14, "held": 14, "removed": 1, "plan": 1, "last": 6, "known": 1}
    assert grown == first == expected


OUTBOX = (
    "WITH o AS (INSERT INTO outbox (id, order_id, position, event_id, event_type, plan_id, payload, tenant_id)"
    " SELECT gen_random_uuid(), $2 || i, 1, gen_random_uuid(), 't', 'p', '{}', 'acme' FROM generate_series(1, $1) AS i"
    " RETURNING id, order_id)"
    " INSERT INTO deliveries (outbox_id, subscription_id, order_id, position, tenant_id)"
    " SELECT id, $3, order_id, 1, 'acme' FROM o"
)
WRITTEN = ["orders", "plans", "deliveries", "outbox", "plan_steps", "decision_log"]


async def write(conn: asyncpg.Connection, new: str, planned: str) -> None:
    """`write_batch` as the group commit runs it: orders `new` (no plan row) and `planned` (a plan row) inserted, a
    notification of each, their counts (+2 live orders; `planned` leaves unstarted_plans)."""
    orders = [[o, "acme", "p", "created", 1, False, 1, "order", 1, "{}", "", None, False] for o in (new, planned)]
    notes = [[str(uuid.uuid4()), o, 1, str(uuid.uuid4()), "t", 1, "p", "{}", None, "acme"] for o in (new, planned)]
    await conn.execute(
        query("gateway.sql", "write_batch"), json.dumps(orders), json.dumps(notes), "[]", None, [], [], "[]", "[]",
        ["acme"], [2], ["acme", "acme"], [new, planned],
    )  # fmt: skip


async def test_the_batch_write_scans_no_table_after_the_tables_grew_past_their_statistics(db: Database) -> None:
    async with db.pool.acquire() as conn, conn.transaction():
        subscription = await conn.fetchval(
            "INSERT INTO subscriptions (name, url, secret, tenant_id) VALUES ('s', 'http://127.0.0.1:9/', 'k', 'acme')"
            " RETURNING id"
        )
        await fill(conn, 100, "small")
        await conn.execute(OUTBOX, 100, "small", subscription)
        for table in TABLES + WRITTEN:
            await conn.execute(f"ANALYZE {table}")
        for i in range(1, 9):  # custom plans, then the generic plan the connection keeps
            await write(conn, f"new{i}", f"smallplanned{i}")
        await fill(conn, 20_000, "grown")
        await conn.execute(OUTBOX, 20_000, "grown", subscription)
        before = await scans(conn, WRITTEN)
        await write(conn, "new9", "smallplanned9")
        after = await scans(conn, WRITTEN)
        unstarted = await conn.fetchval(
            "SELECT sum(used) FROM tenant_usage WHERE tenant_id = 'acme' AND quota = 'unstarted_plans'"
        )
        heads = await conn.fetch("SELECT head FROM deliveries WHERE order_id IN ('new9', 'smallplanned9')")
    assert {t: after[t] - before[t] for t in WRITTEN} == dict.fromkeys(WRITTEN, 0)
    assert unstarted == 20_100 - 9  # every plan row counted by its trigger, less the nine orders inserted with one
    assert [h["head"] for h in heads] == [True, True]
