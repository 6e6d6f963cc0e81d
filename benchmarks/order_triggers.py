"""What counting live orders costs PostgreSQL per step: migration 0027 against the schema before it.

One embedded PostgreSQL, three databases migrated by this tree, two of them turned back to the schema of
migrations 0023/0024 for orders: `before` (0023's statement-level triggers with transition tables and 0024's
index orders_updated_at), `before-no-index` (the same triggers, without the index: the triggers' cost alone)
and `after` (0027: finished_at, row-level triggers firing when an order finishes, the partial index). Each
round runs, in each database in turn, a procedure that takes `--orders` orders through five steps each with
the gateway's upsert (write_batch's orders part), one commit per step (synchronous_commit off: what is
measured is CPU, not the disk's flush), and times it inside PostgreSQL (clock_timestamp: no client, no
network). Prints the median microseconds per step and the share of orders'
updates that were HOT.

    python benchmarks/order_triggers.py --orders 2000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
from pathlib import Path

import asyncpg

from nexus_lab.bench import create_database, drop_database, start_embedded

MIGRATIONS = Path(__file__).resolve().parents[1] / "src" / "nexus" / "store" / "migrations"

STEPS = """
CREATE PROCEDURE bench_steps(prefix text, n int, INOUT seconds float8 DEFAULT 0) LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    states text[] := ARRAY['created', 'inventory_validated', 'payment_processed', 'shipped', 'completed'];
BEGIN
    FOR i IN 1..n LOOP
        FOR s IN 1..5 LOOP
            INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, process,
                                process_version, facts)
            VALUES (prefix || i, 'acme', 'p-' || prefix || i, states[s], s, false, s, 'order', 1, '{}')
            ON CONFLICT (tenant_id, order_id) DO UPDATE SET
                plan_id = EXCLUDED.plan_id, status = EXCLUDED.status, last_seq = EXCLUDED.last_seq,
                tombstone = EXCLUDED.tombstone, outbox_count = EXCLUDED.outbox_count, process = EXCLUDED.process,
                process_version = EXCLUDED.process_version, facts = EXCLUDED.facts, updated_at = now();
            COMMIT;
        END LOOP;
    END LOOP;
    seconds := extract(epoch FROM clock_timestamp() - t0);
END $$;
"""


def before_0027(with_index: bool) -> str:
    """SQL turning a database migrated through 0027 back to 0023/0024's orders triggers (and index)."""
    text = (MIGRATIONS / "0023_tenant_quotas.sql").read_text()
    functions = [
        re.search(rf"CREATE FUNCTION {name}\(\).*?END \$\$;", text, re.S)
        for name in ("nexus_usage_orders_insert", "nexus_usage_orders_update")
    ]
    trigger = re.search(r"CREATE TRIGGER orders_usage_update .*?;", text, re.S)
    assert all(functions) and trigger
    parts = [
        "DROP TRIGGER orders_finished_at_update ON orders",
        "DROP TRIGGER orders_usage_finished ON orders",
        "DROP INDEX orders_finished_at",
        *(m.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION") for m in functions if m),
        trigger.group(0),
    ]
    if with_index:
        parts.append("CREATE INDEX orders_updated_at ON orders (updated_at)")
    return ";\n".join(p.rstrip(";") for p in parts) + ";"


async def run(args: argparse.Namespace, admin: str) -> dict[str, object]:
    variants = {"before": before_0027(True), "before-no-index": before_0027(False), "after": ""}
    urls = {}
    for name, sql in variants.items():
        urls[name] = await create_database(admin, "triggers_" + name.replace("-", "_"), migrate=True)
        conn = await asyncpg.connect(urls[name])
        try:
            if sql:
                await conn.execute(sql)
            await conn.execute(STEPS)
        finally:
            await conn.close()
    per_step: dict[str, list[float]] = {name: [] for name in variants}
    for round_no in range(args.rounds):
        for name, url in urls.items():
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("SET synchronous_commit = off")  # CPU, not the disk's flush per commit
                seconds = await conn.fetchval("CALL bench_steps($1, $2, 0)", f"r{round_no}-", args.orders)
            finally:
                await conn.close()
            per_step[name].append(seconds / (args.orders * 5) * 1e6)
            print(f"round {round_no + 1} {name:16} {per_step[name][-1]:8.1f} us/step", flush=True)
    hot = {}
    for name, url in urls.items():
        conn = await asyncpg.connect(url)
        try:
            await asyncio.sleep(1.5)  # the backends' statistics reach the cumulative view
            row = await conn.fetchrow(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'orders'"
            )
            hot[name] = round(row["n_tup_hot_upd"] / max(row["n_tup_upd"], 1), 3) if row else None
        finally:
            await conn.close()
        await drop_database(admin, "triggers_" + name.replace("-", "_"))
    return {
        "orders_per_round": args.orders,
        "rounds": args.rounds,
        "median_us_per_step": {name: round(statistics.median(v), 1) for name, v in per_step.items()},
        "us_per_step": {name: [round(x, 1) for x in v] for name, v in per_step.items()},
        "hot_update_share": hot,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    embedded, admin = start_embedded()
    try:
        print(json.dumps(asyncio.run(run(args, admin)), indent=2))
    finally:
        embedded.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
