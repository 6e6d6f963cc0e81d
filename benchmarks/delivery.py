"""Webhook delivery throughput and apply-to-delivery latency, with real processes over real HTTP.

For each worker count (default 1, 8, 32), on a fresh database:

1. throughput: N notifications (plans of 5) are applied through `Gateway.submit` first, then a
   `nexus serve --dispatcher-only` process delivers them to a `nexus sink` process; the rate is N over
   the span between the first and the last `delivered_at`, so process start-up is not counted;
2. latency: with the dispatcher running, plans are applied at a steady offered load (half the measured
   throughput) for a few seconds; latency is `delivered_at - outbox.created_at` (both Postgres clocks).

Usage: ``.venv/bin/python benchmarks/delivery.py [--notifications 10000] [--workers 1,8,32]``.
PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from nexus.core import definitions
from nexus.core.decide.items import Incoming
from nexus.delivery.signing import generate_secret
from nexus.delivery.subscriptions import add_subscription
from nexus.gateway import Gateway
from nexus.processes import shipped
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres
from nexus_lab.bench.cpu import postmaster_pid, tree_cpu_seconds
from nexus_lab.procs import free_port, wait_http

T0 = "2026-01-01T00:00:00Z"
STEPS = definitions.main_plan(shipped("order"))  # the order process's steps, in order


def plan(order_id: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = [
        {"user_id": "u", "items": [{"product_id": "p", "quantity": 1, "unit_price": 10}], "total_amount": 10,
         "currency": "USD"},
        {}, {"payment_id": "pay", "amount": 10, "currency": "USD"}, {}, {},
    ]  # fmt: skip
    return [
        {"event_id": str(uuid.uuid4()), "event_type": t, "plan_id": f"plan-{order_id}", "order_id": order_id,
         "seq_id": i + 1, "timestamp": T0, "schema_version": "1.0", "data": data[i]}
        for i, t in enumerate(STEPS)
    ]  # fmt: skip


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "nexus_cli", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


async def new_database(admin_url: str, embedded: EmbeddedPostgres | None) -> str:
    name = f"bench_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    if embedded is not None:
        return embedded.url(name)
    return urllib.parse.urlsplit(admin_url)._replace(path=f"/{name}").geturl()


async def apply_plans(gateway: Gateway, orders: int, prefix: str) -> None:
    for startix in range(0, orders, 100):
        items = [Incoming.parse(e) for i in range(startix, min(orders, startix + 100)) for e in plan(f"{prefix}{i}")]
        await gateway.submit(items)


async def delivered_count(db: Database) -> int:
    return int(await db.fetchval("SELECT count(*) FROM deliveries WHERE state = 'delivered'"))


async def run_one(admin_url: str, embedded: EmbeddedPostgres | None, workers: int, notifications: int,
                  sink_url: str, secret: str, latency_s: float, processes: int = 1,
                  receiver_pids: list[int] | None = None) -> dict[str, Any]:  # fmt: skip
    """One run. Also CPU seconds per 1,000 deliveries of the dispatcher processes, the receiver
    (`receiver_pids`, with their children) and PostgreSQL, counted from the first delivery (so that the
    processes' start-up is not) to the last."""
    url = await new_database(admin_url, embedded)
    # The bench's own receiver listens on loopback: open it to the outbound URL guard.
    db = await Database(Settings(database_url=url, db_pool_size=4, allow_private_urls="127.0.0.0/8")).open()
    gateway = Gateway(db)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")},
           "NEXUS_DATABASE_URL": url, "NEXUS_WEBHOOK_WORKERS": str(workers), "NEXUS_LOG_LEVEL": "WARNING",
           "NEXUS_DB_POOL_SIZE": "6", "NEXUS_ALLOW_PRIVATE_URLS": "127.0.0.0/8"}  # fmt: skip
    try:
        await add_subscription(db, "bench", sink_url + "/hook", secret)
        await apply_plans(gateway, notifications // 5, "t")
        postmaster = await postmaster_pid(url)
        dispatchers = [start(["serve", "--dispatcher-only"], env) for _ in range(processes)]
        try:
            deadline = time.monotonic() + 600
            while (first := await delivered_count(db)) == 0:
                if time.monotonic() > deadline:
                    raise TimeoutError("deliveries did not start")
                await asyncio.sleep(0.01)

            def cpu() -> dict[str, float]:
                return {
                    "dispatchers": sum(tree_cpu_seconds(d.pid) for d in dispatchers),
                    "receiver": sum(tree_cpu_seconds(p) for p in receiver_pids or []),
                    "postgres": tree_cpu_seconds(postmaster) if postmaster else 0.0,
                }

            cpu_before = cpu()
            while (done := await delivered_count(db)) < notifications:
                if time.monotonic() > deadline:
                    raise TimeoutError("deliveries did not finish")
                # Each look is a count over the whole table, PostgreSQL CPU inside the measured window: at
                # 20 looks/s it was ~5-10 % of PostgreSQL's CPU per delivery.
                await asyncio.sleep(0.25)
            cpu_after = cpu()
            per_k = 1000 / max(1, done - first)
            cpu_per_1000 = {k: round((cpu_after[k] - cpu_before[k]) * per_k, 3) for k in cpu_before}
            span = await db.fetchval("SELECT extract(epoch FROM max(delivered_at) - min(delivered_at)) FROM deliveries")
            rate = notifications / float(span)

            # Latency at a steady offered load of half the throughput, plans applied every 50 ms.
            offered = rate / 2
            await db.execute("UPDATE outbox SET created_at = created_at - interval '1 day'")
            plans_per_tick = max(1, round(offered / 5 / 20))
            ticks = int(latency_s * 20)
            t_next = time.monotonic()
            for tick in range(ticks):
                await apply_plans(gateway, plans_per_tick, f"l{tick}-")
                t_next += 0.05
                await asyncio.sleep(max(0.0, t_next - time.monotonic()))
            total = notifications + ticks * plans_per_tick * 5
            while await delivered_count(db) < total:  # noqa: ASYNC110 - polling another process's progress
                await asyncio.sleep(0.1)
            row = await db.fetchrow(
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50,"
                " percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99, count(*) AS n FROM ("
                " SELECT extract(epoch FROM d.delivered_at - o.created_at) * 1000 AS ms FROM deliveries d"
                " JOIN outbox o ON o.id = d.outbox_id WHERE o.created_at > now() - interval '1 hour') AS x"
            )
            assert row is not None
        finally:
            for dispatcher in dispatchers:
                stop(dispatcher)
        return {"workers": workers, "notifications": notifications, "rate": rate,
                "offered": ticks * plans_per_tick * 5 / latency_s, "p50": row["p50"], "p99": row["p99"],
                "latency_n": row["n"], "processes": processes, "cpu_s_per_1000": cpu_per_1000}  # fmt: skip
    finally:
        await db.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notifications", type=int, default=10_000)
    parser.add_argument("--workers", default="1,8,32")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--processes", type=int, default=1, help="dispatcher processes (each with --workers)")
    parser.add_argument("--verify", action="store_true", help="the sink verifies every signature")
    args = parser.parse_args()

    embedded = None
    admin_url = os.environ.get("NEXUS_DATABASE_URL")
    if not admin_url:
        embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="nexus-bench-")), cleanup_mode="delete")
        admin_url = embedded.start()
        # pgserver's URL points at the postgres database; CREATE DATABASE works from there.
    secret = generate_secret()
    port = free_port()
    sink_args = ["sink", "--port", str(port)] + (["--secret", secret] if args.verify else [])
    sink = start(sink_args, {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")})
    results = []
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        for workers in (int(w) for w in args.workers.split(",")):
            n = args.notifications if workers > 1 else min(args.notifications, 2_000)
            result = await run_one(
                admin_url,
                embedded,
                workers,
                n,
                f"http://127.0.0.1:{port}",
                secret,
                args.latency_seconds,
                args.processes,
            )
            results.append(result)
            print(f"workers={workers}: {result['rate']:.0f}/s", flush=True)
    finally:
        stop(sink)
        if embedded is not None:
            embedded.close()

    print(f"\nmachine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print("| workers | notifications | delivered/s | offered/s (latency run) | p50 ms | p99 ms |")
    print("|--------:|--------------:|------------:|------------------------:|-------:|-------:|")
    for r in results:
        print(f"| {r['workers']:>7} | {r['notifications']:>13,} | {r['rate']:>11,.0f} | {r['offered']:>23,.0f} "
              f"| {r['p50']:>6.1f} | {r['p99']:>6.1f} |")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
