"""What writing a group commit's orders costs PostgreSQL: finished_at decided by the fold (migration 0043) against
decided in SQL (migration 0039).

One PostgreSQL, two databases migrated by this tree; `sql` is turned back to 0039's schema (the BEFORE UPDATE
trigger `orders_finished_at_update`, `nexus_order_set_finished_at` of 0033, 0039's insert trigger) and written with
0039's `write_batch` (each row's process joined for its terminal states, the statement named in
`nexus.orders_stamped`); `fold` has this tree's schema and `write_batch` (each row's `finished` flag). Each round
takes `--orders` orders of the shipped process through its five steps, `--batch` orders per statement, one
transaction per statement (synchronous_commit off: CPU, not the disk's flush), in each database in turn, and reads
the CPU its backend used (/proc/<pid>/stat: the server's own time, no client). Prints the median microseconds of
PostgreSQL CPU per step.

    python benchmarks/finished_at_write.py --orders 2000 --batch 32 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

from nexus.store.queries import query
from nexus_lab.bench import admin_postgres, create_database, drop_database

MIGRATIONS = Path(__file__).resolve().parents[1] / "src" / "nexus" / "store" / "migrations"
STATUSES = ("created", "inventory_validated", "payment_processed", "shipped", "completed")
FLAG = "           CASE WHEN (r->>12)::bool THEN now() END\n    FROM jsonb_array_elements($1::jsonb) AS r\n"
JOINED = """           CASE WHEN (r->>5)::bool OR r->>3 = 'aborted'
                     OR coalesce(r->>3 = ANY(coalesce(pr.terminal, ARRAY['completed'])), r->>3 = 'completed')
                THEN now() END
    FROM jsonb_array_elements($1::jsonb) AS r
    LEFT JOIN processes AS pr ON pr.name = r->>7 AND pr.version = (r->>8)::int
    WHERE (SELECT set_config('nexus.orders_stamped', statement_timestamp()::text, true)) IS NOT NULL
"""
PROCESS = "INSERT INTO processes (name, version, content_hash, body, terminal) VALUES ('order', 2, 'x', '', $1)"


def schema_0039() -> str:
    """This tree's schema turned back to migration 0039's finished_at trigger and insert trigger."""
    return "\n".join([
        (MIGRATIONS / "0033_finished_at_cached_terminal.sql").read_text(),
        "CREATE TRIGGER orders_finished_at_update BEFORE UPDATE ON orders FOR EACH ROW"
        " EXECUTE FUNCTION nexus_order_set_finished_at();",
        (MIGRATIONS / "0039_finished_at_by_the_upsert.sql").read_text(),
    ])  # fmt: skip


def backend_cpu_s(pid: int) -> float:
    """The CPU seconds (user + system) a PostgreSQL backend has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def steps(url: str, statement: str, prefix: str, orders: int, batch: int) -> float:
    """Every order through its five steps, `batch` orders per write_batch; the backend's CPU seconds."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SET synchronous_commit = off")
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        prepared = await conn.prepare(statement)
        start = backend_cpu_s(pid)
        for first in range(0, orders, batch):
            ids = [f"{prefix}{i}" for i in range(first, min(first + batch, orders))]
            for seq, status in enumerate(STATUSES, start=1):
                done = seq == len(STATUSES)
                rows = [[o, "acme", f"p-{o}", status, seq, False, seq, "order", 2, "{}", "", None, done] for o in ids]
                counts: list[list[str]] = [[], [], [], []]  # the live_orders deltas are not this benchmark's
                await prepared.fetch(json.dumps(rows), "[]", "[]", datetime.now(UTC), [], [], "[]", "[]", *counts)
        return backend_cpu_s(pid) - start
    finally:
        await conn.close()


async def finished_orders(url: str) -> int:
    """How many orders have finished_at (each database must finish every order it took through its steps)."""
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM orders WHERE finished_at IS NOT NULL"))
    finally:
        await conn.close()


async def run(args: argparse.Namespace, admin: str) -> dict[str, object]:
    fold = query("gateway.sql", "write_batch")
    assert FLAG in fold, "write_batch's finished_at part moved: update this benchmark"
    statements = {"sql": fold.replace(FLAG, JOINED), "fold": fold}
    urls = {}
    for name in statements:
        urls[name] = await create_database(admin, f"finished_{name}", migrate=True)
        conn = await asyncpg.connect(urls[name])
        try:
            await conn.execute(PROCESS, ["completed", "aborted"])
            if name == "sql":
                await conn.execute(schema_0039())
        finally:
            await conn.close()
    per_step: dict[str, list[float]] = {name: [] for name in statements}
    try:
        for round_no in range(args.rounds):
            for name, statement in statements.items():
                seconds = await steps(urls[name], statement, f"r{round_no}-", args.orders, args.batch)
                per_step[name].append(seconds / (args.orders * len(STATUSES)) * 1e6)
                print(f"round {round_no + 1} {name:5} {per_step[name][-1]:7.1f} us/step", flush=True)
        finished = {name: await finished_orders(url) for name, url in urls.items()}
    finally:
        for name in statements:
            await drop_database(admin, f"finished_{name}")
    medians = {name: round(statistics.median(v), 1) for name, v in per_step.items()}
    return {
        "orders_per_round": args.orders, "batch": args.batch, "rounds": args.rounds,
        "finished_orders": finished, "median_us_per_step": medians,
        "fold_over_sql": round(medians["fold"] / medians["sql"], 3),
        "us_per_step": {name: [round(x, 1) for x in v] for name, v in per_step.items()},
        "load_avg": os.getloadavg(),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    with admin_postgres() as admin:
        figures = asyncio.run(run(args, admin))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
