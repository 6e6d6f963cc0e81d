"""Console page render time with 100,000 orders in the database (every page < 200 ms).

Fills a fresh database by SQL (orders; three decision-log rows per order, one in ten a REJECTED step;
a notification and its delivery per order, one in a hundred dead; a few dead letters), then requests
each console page through the app in process (no network: the figure is the gateway's own work, query
plus template), a signed-in operator, `--repeat` times each; prints the median and the max.

Usage: ``.venv/bin/python benchmarks/console_render.py [--orders 100000] [--repeat 20]``.
PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time

import httpx

from nexus.auth.keys import hash_key
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus_lab.bench import admin_postgres, scratch_database

KEY = "nxk_console-bench-operator-key-00000000000000000"

FILL = [
    "INSERT INTO api_keys (name, tenant_id, roles, key_hash) VALUES ('bench', 'default', '{operator}', $1)",
    """INSERT INTO subscriptions (name, url, secret, tenant_id)
       VALUES ('bench-hook', 'http://127.0.0.1:9/hook', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'default')""",
    """INSERT INTO orders (tenant_id, order_id, plan_id, status, last_seq, outbox_count)
       SELECT 'default', 'bo-' || lpad(i::text, 7, '0'), 'bp-' || i,
              (ARRAY['created','inventory_validated','payment_processed','shipped','completed','aborted'])[1 + i % 6],
              1 + i % 5, 1
       FROM generate_series(1, $1::int) AS i""",
    """INSERT INTO decision_log (tenant_id, order_id, position, at, actor, event_id, plan_id, seq, event_type,
                                decision, code, "check", message, prev_hash, hash)
       SELECT 'default', 'bo-' || lpad(i::text, 7, '0'), p, now() - make_interval(secs => i), 'bench',
              gen_random_uuid()::text, 'bp-' || i, p, 'OrderCreated',
              CASE WHEN p = 3 AND i % 10 = 0 THEN 'REJECTED' ELSE 'APPLY' END,
              CASE WHEN p = 3 AND i % 10 = 0 THEN 'INVALID_TRANSITION' END, NULL,
              CASE WHEN p = 3 AND i % 10 = 0 THEN 'not allowed' END,
              sha256(('p' || i || p)::bytea), sha256(('h' || i || p)::bytea)
       FROM generate_series(1, $1::int) AS i, generate_series(1, 3) AS p""",
    """INSERT INTO outbox (id, tenant_id, order_id, position, event_id, event_type, seq_id, plan_id, payload,
                          traceparent)
       SELECT gen_random_uuid(), 'default', 'bo-' || lpad(i::text, 7, '0'), 1, gen_random_uuid(), 'OrderCreated',
              1, 'bp-' || i, '{}'::jsonb, '00-' || md5(i::text) || '-00f067aa0ba902b7-01'
       FROM generate_series(1, $1::int) AS i""",
    """INSERT INTO deliveries (outbox_id, subscription_id, tenant_id, order_id, position, state, attempts,
                              last_status, dead_at, dead_reason)
       SELECT o.id, s.id, o.tenant_id, o.order_id, 1,
              CASE WHEN right(o.order_id, 2) = '00' THEN 'dead' ELSE 'delivered' END, 1,
              CASE WHEN right(o.order_id, 2) = '00' THEN 400 ELSE 200 END,
              CASE WHEN right(o.order_id, 2) = '00' THEN now() END,
              CASE WHEN right(o.order_id, 2) = '00' THEN 'rejected' END
       FROM outbox o, subscriptions s""",
    """INSERT INTO dead_letters (source, code, error, payload, tenant_id)
       SELECT 'http', 'PARSE_ERROR', 'not JSON', 'x', 'default' FROM generate_series(1, 50)""",
    "ANALYZE",
]


async def main(args: argparse.Namespace, admin: str) -> None:
    async with scratch_database(admin, "bench_console", pool_size=4) as db:
        started = time.perf_counter()
        for sql in FILL:
            params = [hash_key(KEY)] if "api_keys" in sql else ([args.orders] if "$1::int" in sql else [])
            await db.execute(sql, *params)
        print(f"filled {args.orders:,} orders in {time.perf_counter() - started:.1f} s")
        app = create_app(db, Gateway(db), settings=db.settings)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console") as client:
            form = await client.get("/console/login")
            token = re.search(r'name="csrf" value="([^"]+)"', form.text)
            assert token is not None
            signed = await client.post("/console/login", data={"csrf": token.group(1), "api_key": KEY})
            assert signed.status_code == 303, signed.text
            middle = f"bo-{args.orders // 2:07d}"
            pages = {
                "orders (first page)": "/console/orders",
                "orders, status filter": "/console/orders?status=shipped",
                "orders, deep keyset page": f"/console/orders?after=default/{middle}",
                "orders, id search": f"/console/orders?q={middle}",
                "orders, process filter": "/console/orders?process=order&status=aborted",
                "order page": f"/console/orders/default/bo-{10:07d}",
                "blocked actions": "/console/blocked",
                "dead letters + deliveries": "/console/dead",
                "subscriptions": "/console/subscriptions",
                "processes": "/console/processes",
            }
            print("| page | median ms | max ms | bytes |\n|---|---:|---:|---:|")
            for label, path in pages.items():
                times = []
                size = 0
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    response = await client.get(path)
                    times.append((time.perf_counter() - t) * 1000)
                    assert response.status_code == 200, (path, response.status_code)
                    size = len(response.content)
                print(f"| {label} | {statistics.median(times):.1f} | {max(times):.1f} | {size:,} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    arguments = parser.parse_args()
    with admin_postgres() as admin:
        asyncio.run(main(arguments, admin))
