"""Retained five-step orders made in SQL for the retention bench (benchmarks/retention.py, issue 35 item 5).

Each generated order leaves the rows a real finished five-step order of the built-in `order` process leaves
once its webhooks were delivered: its `orders` row (completed, its facts, `finished_at` set), five `outbox`
rows (payloads of a real order's shape and size), five `deliveries` (delivered to one subscription) and five
`decision_log` rows (one chain: APPLY of each step). Not generated: delivery attempts (pruned long before an
order's retention period ends) and plans (wrk's orders are not started by `POST /v1/plans`).

Speed (3,000,000 orders are 48,000,000 rows): one `INSERT ... SELECT generate_series` per table and chunk,
with the four tables' indexes and constraints dropped while loading and built again afterwards from the
catalog's own definitions (every one of them is back before anything is measured: `restore`), triggers off
for the loading session (`session_replication_role = replica`: the quota counters' net change for an order
inserted already finished is nothing), checkpoints spaced out while loading only, then `VACUUM ANALYZE`
so that autovacuum does not start on the new rows during a measurement.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

TABLES = ("orders", "outbox", "deliveries", "decision_log")
"""The tables a retained order has rows in (and whose indexes are rebuilt after loading)."""

AGE = "29 days"
"""How long ago the generated orders finished: inside the default period (30 days), so that the remover is idle
without a tenant override, and made due by a tenant period shorter than this."""

_ITEMS = [
    {"quantity": 2, "product_id": "prod_a", "unit_price": "3.50"},
    {"quantity": 1, "product_id": "prod_b", "unit_price": "3.00"},
]
_STEPS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("OrderCreated", "created", {"user_id": "u1", "items": _ITEMS, "total_amount": "10.00", "currency": "USD"}),
    ("InventoryValidated", "inventory_validated", {"warehouse_id": "wh", "reserved_items": _ITEMS}),
    ("PaymentProcessed", "payment_processed", {"payment_id": "pay", "amount": "10.00", "currency": "USD"}),
    ("OrderShipped", "shipped", {}),
    ("OrderCompleted", "completed", {}),
)
_FACTS = {
    "items": [{**item, "unit_price": 350 if item["product_id"] == "prod_a" else 300} for item in _ITEMS],
    "amount": 1000,
    "user_id": "u1",
    "currency": "USD",
    "payment_id": "pay",
    "total_amount": 1000,
    "warehouse_id": "wh",
    "reserved_items": [{**item, "unit_price": 350 if item["product_id"] == "prod_a" else 300} for item in _ITEMS],
}


def payloads() -> list[dict[str, object]]:
    """The five outbox payloads of a real order (as the gateway writes them), ids of one example order."""
    order, plan, event = "ret-1000000", "ret-1000000-plan", "00000000-0000-4000-8000-000000000000"
    out: list[dict[str, object]] = []
    for seq, (event_type, status, data) in enumerate(_STEPS, start=1):
        envelope = {"data": data, "seq_id": seq, "plan_id": plan, "process": None, "deadline": None,
                    "event_id": event, "order_id": order, "tenant_id": "default",
                    "timestamp": "2026-11-04T00:00:00Z", "event_type": event_type, "correlation_id": None,
                    "schema_version": "1.0"}  # fmt: skip
        notification = {"seq_id": seq, "status": status, "plan_id": plan, "order_id": order, "position": seq,
                        "tenant_id": "default", "event_type": event_type, "notification_id": event}  # fmt: skip
        out.append({"event": envelope, **notification})
    return out


_ORDERS = f"""
INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, created_at, updated_at,
                    process, process_version, facts, finished_at)
SELECT 'ret-' || i, 'default', 'ret-' || i || '-plan', 'completed', 5, false, 5, t - interval '1 second', t,
       'order', $3, $4::jsonb, t
FROM generate_series($1::bigint, $2::bigint) AS i, (SELECT now() - interval '{AGE}' AS t) AS c
"""
_OUTBOX = f"""
INSERT INTO outbox (id, order_id, position, event_id, event_type, seq_id, plan_id, payload, created_at, tenant_id)
SELECT md5('n-' || i || '-' || p.seq)::uuid, 'ret-' || i, p.seq, md5('e-' || i || '-' || p.seq)::uuid,
       p.payload->>'event_type', p.seq, 'ret-' || i || '-plan', p.payload, t, 'default'
FROM generate_series($1::bigint, $2::bigint) AS i,
     jsonb_array_elements($3::jsonb) WITH ORDINALITY AS p (payload, seq),
     (SELECT now() - interval '{AGE}' AS t) AS c
"""
_DELIVERIES = f"""
INSERT INTO deliveries (outbox_id, subscription_id, order_id, position, state, attempts, next_attempt_at, last_status,
                        created_at, delivered_at, head, tenant_id)
SELECT md5('n-' || i || '-' || s)::uuid, $3, 'ret-' || i, s, 'delivered', 1, t, 200, t, t, false, 'default'
FROM generate_series($1::bigint, $2::bigint) AS i, generate_series(1, 5) AS s,
     (SELECT now() - interval '{AGE}' AS t) AS c
"""
_DECISIONS = f"""
INSERT INTO decision_log (tenant_id, order_id, position, at, actor, event_id, plan_id, seq, event_type, decision,
                          prev_hash, hash, actor_name)
SELECT 'default', 'ret-' || i, s, t, 'key:1', md5('e-' || i || '-' || s)::uuid::text, 'ret-' || i || '-plan', s,
       ($3::text[])[s], 'APPLY',
       CASE WHEN s = 1 THEN decode(repeat('00', 32), 'hex') ELSE sha256(convert_to(i || '-' || s - 1, 'UTF8')) END,
       sha256(convert_to(i || '-' || s, 'UTF8')), 'lab'
FROM generate_series($1::bigint, $2::bigint) AS i, generate_series(1, 5) AS s,
     (SELECT now() - interval '{AGE}' AS t) AS c
"""

_FOREIGN_KEYS = """
SELECT conrelid::regclass::text AS tbl, conname AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint
WHERE contype = 'f' AND (conrelid = ANY($1::regclass[]) OR confrelid = ANY($1::regclass[])) ORDER BY 1, 2
"""
_KEYS = """
SELECT conrelid::regclass::text AS tbl, conname AS name, pg_get_constraintdef(oid) AS def FROM pg_constraint
WHERE contype IN ('p', 'u') AND conrelid = ANY($1::regclass[]) ORDER BY 1, 2
"""
_INDEXES = """
SELECT i.indrelid::regclass::text AS tbl, i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
FROM pg_index i WHERE i.indrelid = ANY($1::regclass[])
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.contype IN ('p', 'u'))
ORDER BY 1, 2
"""


@dataclass(frozen=True)
class Layout:
    """The four tables' foreign keys, key constraints and other indexes, as the catalog defines them."""

    foreign_keys: list[tuple[str, str, str]]
    keys: list[tuple[str, str, str]]
    indexes: list[tuple[str, str, str]]


async def layout(conn: asyncpg.Connection) -> Layout:
    """The catalog's definitions of what `drop` removes and `restore` builds again."""
    rows = [
        [(r["tbl"], r["name"], r["def"]) for r in await conn.fetch(query, list(TABLES))]
        for query in (_FOREIGN_KEYS, _KEYS, _INDEXES)
    ]
    return Layout(*rows)


async def drop(conn: asyncpg.Connection, saved: Layout) -> None:
    """Foreign keys first (they depend on the keys' indexes), then keys, then the other indexes."""
    for table, name, _ in saved.foreign_keys + saved.keys:
        await conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
    for _, name, _ in saved.indexes:
        await conn.execute(f"DROP INDEX {name}")


async def restore(conn: asyncpg.Connection, saved: Layout, say: Callable[[str], None]) -> None:
    """Every index, key and foreign key back, as defined before `drop` (foreign keys validated)."""
    for table, name, definition in saved.keys:
        started = time.perf_counter()
        await conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        say(f"  built {name} ({time.perf_counter() - started:.0f} s)")
    for _, name, definition in saved.indexes:
        started = time.perf_counter()
        await conn.execute(definition)
        say(f"  built {name} ({time.perf_counter() - started:.0f} s)")
    for table, name, definition in saved.foreign_keys:
        started = time.perf_counter()
        await conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        say(f"  validated {name} ({time.perf_counter() - started:.0f} s)")


async def subscription(conn: asyncpg.Connection) -> int:
    """The one (disabled) subscription the generated deliveries went to."""
    found = await conn.fetchval("SELECT id FROM subscriptions WHERE name = 'bench'")
    if found is None:
        found = await conn.fetchval(
            "INSERT INTO subscriptions (name, url, secret, tenant_id, enabled) VALUES ('bench', "
            "'http://127.0.0.1:9/', 'whsec_eA==', NULL, false) RETURNING id"
        )
    return int(found)


async def generate(url: str, first: int, last: int, say: Callable[[str], None], chunk: int = 500_000) -> float:
    """Retained orders ret-`first`..ret-`last` with every row of `TABLES`; the seconds it took."""
    started = time.perf_counter()
    conn = await asyncpg.connect(url)
    try:
        sub = await subscription(conn)
        version = await conn.fetchval("SELECT coalesce(max(version), 1) FROM processes WHERE name = 'order'")
        events = [event_type for event_type, _, _ in _STEPS]
        await conn.execute("ALTER SYSTEM SET max_wal_size = '16GB'")
        await conn.execute("SELECT pg_reload_conf()")
        await conn.execute("SET maintenance_work_mem = '1GB'")
        await conn.execute("SET synchronous_commit = off")
        saved = await layout(conn)
        await drop(conn, saved)
        await conn.execute("SET session_replication_role = replica")
        for lo in range(first, last + 1, chunk):
            hi = min(last, lo + chunk - 1)
            for table, statement, args in (
                ("orders", _ORDERS, (version, json.dumps(_FACTS))),
                ("outbox", _OUTBOX, (json.dumps(payloads()),)),
                ("deliveries", _DELIVERIES, (sub,)),
                ("decision_log", _DECISIONS, (events,)),
            ):
                await conn.execute(statement, lo, hi, *args)
                say(f"  {table}: orders up to {hi:,} ({time.perf_counter() - started:.0f} s)")
        await conn.execute("SET session_replication_role = DEFAULT")
        await restore(conn, saved, say)
        for table in TABLES:
            await conn.execute(f"VACUUM ANALYZE {table}")
            say(f"  vacuumed {table} ({time.perf_counter() - started:.0f} s)")
        await conn.execute("ALTER SYSTEM RESET max_wal_size")
        await conn.execute("SELECT pg_reload_conf()")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    return time.perf_counter() - started
