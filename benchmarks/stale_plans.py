"""The group commit's read and write against tables grown past their statistics: migration 0046's functions
(planned for reads by key) against the same SQL run as plain prepared statements (the form before 0046).

One embedded PostgreSQL, one database per form, migrated by this tree. In each: the tables the statements read hold
`--small` rows each and are analyzed; the statements run a few times on one connection (its prepared statements keep
their generic plans); the tables are grown by `--grown` rows without an ANALYZE (what a tenant's load does between
two autovacuum runs); then analyzed again. At each stage, the median time of `read_batch` (16 orders, steps
validated, six of them numbered) and of `write_batch` (two orders inserted, one with a plan row, a notification
each to one subscription), measured from the client over `--runs` runs.

    python benchmarks/stale_plans.py --small 100 --grown 20000 --runs 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
import uuid
from pathlib import Path

import asyncpg

from nexus_lab.bench import create_database, drop_database, start_embedded

MIGRATIONS = Path(__file__).resolve().parents[1] / "src" / "nexus" / "store" / "migrations"
MIGRATION = MIGRATIONS / "0046_batch_statements_by_key.sql"

FILL = """
INSERT INTO orders (tenant_id, order_id, plan_id, status, last_seq, process, process_version)
    SELECT 'acme', $2 || i, 'p', 'created', 1, 'order', 1 FROM generate_series(1, $1) AS i;
INSERT INTO pending_events (tenant_id, order_id, seq_id, event_id, plan_id, envelope)
    SELECT 'acme', $2 || i, 3, gen_random_uuid(), 'p', '{}' FROM generate_series(1, $1) AS i;
INSERT INTO rejected_events (event_id, order_id, plan_id, tenant_id, event_type, code, message, envelope)
    SELECT gen_random_uuid(), $2 || i, 'p', 'acme', 't', 'c', 'm', '{}' FROM generate_series(1, $1) AS i;
INSERT INTO approvals (approval_id, tenant_id, order_id, event_id, plan_id, seq_id, event_type, envelope)
    SELECT gen_random_uuid(), 'acme', $2 || i, gen_random_uuid(), 'p', 2, 't', '{}' FROM generate_series(1, $1) AS i;
INSERT INTO plan_steps (tenant_id, order_id, event_id, keyed, digest, decision, decided_at, seq_id)
    SELECT 'acme', $2 || i, gen_random_uuid(), false, 'd', 'APPLY', now(), 1 FROM generate_series(1, $1) AS i;
INSERT INTO plans (tenant_id, order_id, plan_id, process, actor)
    SELECT 'acme', $2 || 'planned' || i, 'p', 'order', 'bench' FROM generate_series(1, $1) AS i;
WITH o AS (INSERT INTO outbox (id, order_id, position, event_id, event_type, plan_id, payload, tenant_id)
           SELECT gen_random_uuid(), $2 || i, 1, gen_random_uuid(), 't', 'p', '{}', 'acme'
           FROM generate_series(1, $1) AS i RETURNING id, order_id)
INSERT INTO deliveries (outbox_id, subscription_id, order_id, position, tenant_id)
    SELECT id, (SELECT min(id) FROM subscriptions), order_id, 1, 'acme' FROM o;
"""
TABLES = ["orders", "pending_events", "rejected_events", "approvals", "plan_steps", "plans", "outbox", "deliveries"]


def statements() -> dict[str, dict[str, str]]:
    """Each form's two statements: the functions (as gateway.sql calls them) and their bodies as plain SQL."""
    text = MIGRATION.read_text()

    def body(name: str) -> str:
        found = re.search(rf"CREATE FUNCTION {name}\(.*?RETURN QUERY\n(.*?);\nEND \$\$;", text, re.S)
        assert found, name
        return found.group(1)

    read_args = "$1::text[], $2::text[], $3::text[], $4::bool, $5::text[], $6::text[], $7::uuid[]"
    write_args = (
        "$1::jsonb, $2::jsonb, $3::jsonb, $4::timestamptz, $5::text[], $6::text[], $7::jsonb, $8::jsonb,"
        " $9::text[], $10::int[], $11::text[], $12::text[]"
    )
    return {
        "function": {
            "read": f"SELECT * FROM nexus_read_batch({read_args})",
            "write": f"SELECT * FROM nexus_write_batch({write_args})",
        },
        "statement": {"read": body("nexus_read_batch"), "write": body("nexus_write_batch")},
    }


async def fill(conn: asyncpg.Connection, rows: int, prefix: str) -> None:
    for statement in FILL.split(";\n"):
        if statement.strip():
            await conn.execute(statement, rows, prefix)


async def timed(conn: asyncpg.Connection, form: dict[str, str], runs: int, stage: str) -> dict[str, float]:
    keys = [f"small{i}" for i in range(1, 97, 6)]
    read_args = (["acme"] * 16, keys, ["acme"], True, ["acme"] * 6, keys[:6], [uuid.uuid4()])
    reads, writes = [], []
    for n in range(runs):
        started = time.perf_counter()
        await conn.fetch(form["read"], *read_args)
        reads.append(time.perf_counter() - started)
        new, planned = f"{stage}-new{n}", f"smallplanned{n + 1}-{stage}"
        orders = [[o, "acme", "p", "created", 1, False, 1, "order", 1, "{}", "", None, False] for o in (new, planned)]
        notes = [[str(uuid.uuid4()), o, 1, str(uuid.uuid4()), "t", 1, "p", "{}", None, "acme"] for o in (new, planned)]
        started = time.perf_counter()
        await conn.fetch(
            form["write"], json.dumps(orders), json.dumps(notes), "[]", None, [], [], "[]", "[]", ["acme"], [2],
            ["acme", "acme"], [new, planned],
        )  # fmt: skip
        writes.append(time.perf_counter() - started)
    return {"read_us": round(statistics.median(reads) * 1e6), "write_us": round(statistics.median(writes) * 1e6)}


async def measure(url: str, form: dict[str, str], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "INSERT INTO subscriptions (name, url, secret, tenant_id) VALUES ('s', 'http://127.0.0.1:9/', 'k', 'acme')"
        )
        stages: dict[str, dict[str, float]] = {}
        await fill(conn, args.small, "small")
        for table in TABLES:
            await conn.execute(f"ANALYZE {table}")
        stages["small, analyzed"] = await timed(conn, form, args.runs, "a")
        await fill(conn, args.grown, "grown")
        stages["grown, not analyzed"] = await timed(conn, form, args.runs, "b")
        for table in TABLES:
            await conn.execute(f"ANALYZE {table}")
        stages["grown, analyzed"] = await timed(conn, form, args.runs, "c")
        return stages
    finally:
        await conn.close()


async def run(args: argparse.Namespace, admin: str) -> dict[str, object]:
    results: dict[str, object] = {"small": args.small, "grown": args.grown, "runs": args.runs}
    for name, form in statements().items():
        database = f"stale_{name}"
        url = await create_database(admin, database, migrate=True)
        try:
            results[name] = stages = await measure(url, form, args)
            for stage, figures in stages.items():
                print(f"{name:10} {stage:22} read {figures['read_us']:>8} us   write {figures['write_us']:>8} us")
        finally:
            await drop_database(admin, database)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--grown", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    embedded, admin = start_embedded()
    try:
        results = asyncio.run(run(args, admin))
    finally:
        embedded.close()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
