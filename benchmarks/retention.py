"""Retention's cost (issue 35 items 1 and 5): the hot path under wrk with 0 and N retained five-step orders, the
same with the remover working through a backlog of them vs idle, and the remover's cost per 1,000 orders.

One run, one embedded PostgreSQL, one `nexus serve --no-dispatcher` (its remover sweeping every second):

1. 0 retained orders: wrk (one event per request, five-step orders, 16 connections);
2. N retained five-step orders generated in SQL (orders, 5 outbox rows and 5 delivered deliveries each), finished
   31 days ago but kept by a tenant period of 90 days: wrk again (the remover idle: nothing is due);
3. the tenant's period dropped: the whole backlog is due and the remover works through it; wrk again while it
   does (the remover working), then the remover alone for a while: orders removed per second and CPU seconds
   (gateway process + PostgreSQL) per 1,000 orders removed.

With `--interleave N` instead: two databases (0 and N retained orders) and two gateways, wrk on each in turn
for `--rounds` rounds (medians), so the machine's changing load weighs on both alike.

Free disk is checked (and printed) before generating. Usage:
``.venv/bin/python benchmarks/retention.py [--retained 1000000 ...] [--seconds 10] [--connections 16]``,
``.venv/bin/python benchmarks/retention.py --interleave 300000 [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from nexus.store.embedded import EmbeddedPostgres
from nexus_lab.bench import create_database
from nexus_lab.bench.scenarios import UNLIMITED_KEY, start_server
from nexus_lab.bench.wrk import _script, postmaster_pid, run_wrk, tree_cpu_s

GENERATE = """
WITH o AS (
    INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, outbox_count, process, updated_at)
    SELECT 'ret-' || i, 'default', 'p-ret-' || i, 'completed', 5, 5, 'order', now() - interval '31 days'
    FROM generate_series($1::bigint, $2::bigint) AS i
    RETURNING order_id, plan_id
), x AS (
    INSERT INTO outbox (id, order_id, position, event_id, event_type, seq_id, plan_id, payload, tenant_id)
    SELECT gen_random_uuid(), o.order_id, s, gen_random_uuid(), 'Step' || s, s, o.plan_id, '{"event": {}}', 'default'
    FROM o CROSS JOIN generate_series(1, 5) AS s
    RETURNING id, order_id, position
)
INSERT INTO deliveries (outbox_id, subscription_id, order_id, position, state, tenant_id, delivered_at)
SELECT x.id, $3, x.order_id, x.position, 'delivered', 'default', now() FROM x
"""


async def sql(url: str, statement: str, *args: Any) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(statement, *args)
    finally:
        await conn.close()


def measure(base: str, seconds: float, connections: int, lua: Path) -> dict[str, float]:
    run_wrk(base, connections, 3, uuid.uuid4().hex[:8], lua)  # warm-up
    out = run_wrk(base, connections, seconds, uuid.uuid4().hex[:8], lua)
    return {"events_s": round(out["requests"] / (out["duration_us"] / 1e6)), "p99_ms": round(out["p99_us"] / 1e3, 1)}


async def bench(args: argparse.Namespace, url: str, say: Any) -> dict[str, Any]:
    lua = _script("wrk_orders.lua")
    base = f"http://127.0.0.1:{args.port}"
    postgres = await postmaster_pid(url)
    results: dict[str, Any] = {"retained": {}}
    await sql(url, "INSERT INTO tenant_limits (tenant_id, max_order_amount, retention_s) VALUES ('default', 100000, "
                   "7776000)")  # fmt: skip
    generated = 0
    for retained in [0, *args.retained]:
        if retained > generated:
            free = shutil.disk_usage(tempfile.gettempdir()).free / 1e9
            say(f"free disk: {free:.1f} GB; generating {retained - generated:,} retained orders")
            results.setdefault("generate_s", {})[retained] = round(
                await generate_range(url, generated + 1, retained, say)
            )
            generated = retained
        server = start_server(url, args.port)
        try:
            results["retained"][retained] = measure(base, args.seconds, args.connections, lua)
            say(f"{retained:,} retained, remover idle: {results['retained'][retained]}")
            if retained == max([0, *args.retained]) and retained:
                results["remover"] = await working(args, url, base, server.pid, postgres, lua, say)
        finally:
            server.terminate()
            server.wait(20)
    return results


async def generate_range(url: str, first: int, last: int, say: Any) -> float:
    """Retained five-step orders ret-`first`..ret-`last`, in chunks of 50,000; the seconds it took."""
    started = time.perf_counter()
    conn = await asyncpg.connect(url)
    try:
        sub = await conn.fetchval("SELECT id FROM subscriptions WHERE name = 'bench'")
        if sub is None:
            sub = await conn.fetchval(
                "INSERT INTO subscriptions (name, url, secret, tenant_id, enabled) VALUES ('bench', "
                "'http://127.0.0.1:9/', 'whsec_eA==', NULL, false) RETURNING id"
            )
        for lo in range(first, last + 1, 50_000):
            hi = min(last, lo + 49_999)
            await conn.execute(GENERATE, lo, hi, sub)
            say(f"  generated up to {hi:,} ({time.perf_counter() - started:.0f} s)")
        for table in ("orders", "outbox", "deliveries"):
            await conn.execute(f"VACUUM ANALYZE {table}")
    finally:
        await conn.close()
    return time.perf_counter() - started


async def working(
    args: argparse.Namespace, url: str, base: str, gateway: int, postgres: int, lua: Path, say: Any
) -> dict[str, Any]:
    """The backlog made due; wrk while the remover works; then the remover alone."""
    await sql(url, "UPDATE tenant_limits SET retention_s = NULL")
    await asyncio.sleep(2)  # its next pass (every second) finds the backlog
    before = await sql(url, "SELECT count(*) FROM removed_orders")
    loaded = measure(base, args.seconds, args.connections, lua)
    during = await sql(url, "SELECT count(*) FROM removed_orders") - before
    say(f"remover working: {loaded}, {during:,} orders removed meanwhile")
    cpu0, t0 = tree_cpu_s(gateway) + tree_cpu_s(postgres), time.perf_counter()
    n0 = await sql(url, "SELECT count(*) FROM removed_orders")
    await asyncio.sleep(args.seconds)
    n1 = await sql(url, "SELECT count(*) FROM removed_orders")
    cpu1, t1 = tree_cpu_s(gateway) + tree_cpu_s(postgres), time.perf_counter()
    alone = n1 - n0
    per_1k = (cpu1 - cpu0) / max(1, alone) * 1000
    say(f"remover alone: {alone / (t1 - t0):,.0f} orders/s, {per_1k:.2f} CPU s per 1,000 orders")
    return {
        **loaded,
        "removed_during_wrk": during,
        "alone_orders_s": round(alone / (t1 - t0)),
        "cpu_s_per_1k_orders": round(per_1k, 2),
    }


async def interleaved(args: argparse.Namespace, admin: str, say: Any) -> dict[str, Any]:
    """0 vs `args.interleave` retained orders, A/B/A/B: two databases, two gateways, wrk on each in turn (the
    machine's load changing between runs weighs on both alike)."""
    lua = _script("wrk_orders.lua")
    empty = await create_database(admin, "retention_empty", migrate=True)
    full = await create_database(admin, "retention_full", migrate=True)
    for url in (empty, full):
        await sql(url, "INSERT INTO tenant_limits (tenant_id, max_order_amount, retention_s) VALUES ('default', "
                       "100000, 7776000)")  # fmt: skip
    say(f"free disk: {shutil.disk_usage(tempfile.gettempdir()).free / 1e9:.1f} GB; generating {args.interleave:,}")
    await generate_range(full, 1, args.interleave, say)
    servers = [start_server(empty, args.port), start_server(full, args.port + 1)]
    runs: dict[str, list[dict[str, float]]] = {"0": [], str(args.interleave): []}
    try:
        for _ in range(args.rounds):
            for name, port in (("0", args.port), (str(args.interleave), args.port + 1)):
                runs[name].append(measure(f"http://127.0.0.1:{port}", args.seconds, args.connections, lua))
                say(f"{name} retained: {runs[name][-1]}")
    finally:
        for server in servers:
            server.terminate()
            server.wait(20)
    return {
        name: {k: statistics.median(r[k] for r in rs) for k in ("events_s", "p99_ms")} | {"runs": rs}
        for name, rs in runs.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retained", type=int, nargs="*", default=[1_000_000])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--port", type=int, default=8791)
    parser.add_argument("--interleave", type=int, default=0, help="instead: 0 vs N retained, A/B/A/B, same run")
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds of --interleave")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here too")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk not installed", file=sys.stderr)
        return 2
    import os

    os.environ.update({**UNLIMITED_KEY, "NEXUS_RETENTION_SWEEP_S": "1"})
    say = lambda line: print(line, flush=True)  # noqa: E731 - one line of output each
    data_dir = Path(tempfile.mkdtemp(prefix="nexus-retention-bench-"))
    embedded = EmbeddedPostgres(data_dir, cleanup_mode="delete")
    admin = embedded.start()
    try:
        if args.interleave:
            results = asyncio.run(interleaved(args, admin, say))
        else:
            url = asyncio.run(create_database(admin, "retention_bench", migrate=True))
            results = asyncio.run(bench(args, url, say))
    finally:
        embedded.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
