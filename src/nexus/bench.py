"""`nexus bench`: throughput and latency of the gateway, side by side with the raw-SQL floor, in one run.

Scenarios (each on its own orders, in one fresh database):
- ``raw``: the same writes without the gateway, one transaction per event (advisory lock, select, upsert,
  outbox insert): the per-event floor;
- ``submit-1``: `Gateway.submit` with one event per call;
- ``submit-batch``: `Gateway.submit` with batches of 200 events, orders partitioned by hash across workers;
- ``http``: one event per HTTP request to a `nexus serve` process (group commit on the server side).
Each runs at the concurrencies asked for; machines here are noisy, so compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from nexus.core.envelope import EventEnvelope
from nexus.core.process import STEPS
from nexus.gateway import Gateway, Incoming
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres
from nexus.store.migrate import apply_migrations

RAW_SQL = [
    "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
    "SELECT last_seq FROM orders WHERE order_id = $1",
]
RAW_UPSERT = (
    "INSERT INTO orders (order_id, plan_id, status, last_seq, outbox_count) VALUES ($1, $2, $3, $4, $4)"
    " ON CONFLICT (order_id) DO UPDATE SET status = EXCLUDED.status, last_seq = EXCLUDED.last_seq,"
    " outbox_count = EXCLUDED.outbox_count, updated_at = now()"
)
RAW_OUTBOX = (
    "INSERT INTO outbox (id, order_id, position, event_id, event_type, seq_id, plan_id, payload)"
    " VALUES ($1, $2, $3, $4, $5, $3, $6, $7::jsonb)"
)


def make_plans(prefix: str, plans: int) -> list[list[EventEnvelope]]:
    now = dt.datetime.now(dt.UTC)
    out = []
    for i in range(plans):
        order_id, plan_id = f"{prefix}-{i}", f"{prefix}-plan-{i}"
        out.append(
            [
                EventEnvelope(
                    event_id=uuid.uuid4(),
                    event_type=t,
                    plan_id=plan_id,
                    order_id=order_id,
                    seq_id=n,
                    timestamp=now,
                    data={"amount": 10} if n == 3 else {},
                )
                for n, t in enumerate(STEPS, start=1)
            ]
        )
    return out


def split(plans: list[list[EventEnvelope]], workers: int) -> list[list[list[EventEnvelope]]]:
    parts: list[list[list[EventEnvelope]]] = [[] for _ in range(workers)]
    for plan in plans:
        parts[zlib.crc32(plan[0].order_id.encode()) % workers].append(plan)
    return parts


async def timed(
    parts: list[list[list[EventEnvelope]]], call: Callable[[list[EventEnvelope]], Awaitable[None]], chunk: int
) -> tuple[float, list[float]]:
    """Run every worker's events in `chunk`-sized calls (in plan order); return elapsed s and call latencies."""
    latencies: list[float] = []

    async def worker(plans: list[list[EventEnvelope]]) -> None:
        # Interleave plans step by step so a batch holds many orders, as real traffic does.
        events = [plan[s] for s in range(5) for plan in plans]
        for lo in range(0, len(events), chunk):
            t = time.perf_counter()
            await call(events[lo : lo + chunk])
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(worker(p) for p in parts))
    return time.perf_counter() - start, latencies


def row(name: str, conc: int, events: int, elapsed: float, lat: list[float], unit: str = "call") -> dict[str, Any]:
    lat_sorted = sorted(lat)
    return {
        "scenario": name,
        "concurrency": conc,
        "events": events,
        "events_per_s": round(events / elapsed, 1),
        "p50_ms": round(statistics.median(lat_sorted) * 1000, 2),
        "p99_ms": round(lat_sorted[min(len(lat_sorted) - 1, int(len(lat_sorted) * 0.99))] * 1000, 2),
        "latency_of": unit,
    }


async def bench_raw(url: str, plans: int, conc: int) -> dict[str, Any]:
    pool = await asyncpg.create_pool(url, min_size=conc, max_size=conc)
    try:

        async def call(events: list[EventEnvelope]) -> None:
            for e in events:
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute(RAW_SQL[0], e.order_id)
                    await conn.fetchval(RAW_SQL[1], e.order_id)
                    await conn.execute(RAW_UPSERT, e.order_id, e.plan_id, "created", e.seq_id)
                    await conn.execute(
                        RAW_OUTBOX, uuid.uuid4(), e.order_id, e.seq_id, e.event_id, e.event_type.value,
                        e.plan_id, e.model_dump_json(),
                    )  # fmt: skip

        data = make_plans(f"raw{conc}", plans)
        elapsed, lat = await timed(split(data, conc), call, 1)
        return row("raw SQL floor (1 tx/event)", conc, plans * 5, elapsed, lat, "event")
    finally:
        await pool.close()


async def bench_submit(db: Database, plans: int, conc: int, chunk: int) -> dict[str, Any]:
    gateway = Gateway(db)

    async def call(events: list[EventEnvelope]) -> None:
        await gateway.submit([Incoming.of(e) for e in events])

    data = make_plans(f"sub{conc}x{chunk}", plans)
    elapsed, lat = await timed(split(data, conc), call, chunk)
    name = "Gateway.submit, 1 event/call" if chunk == 1 else f"Gateway.submit, batches of {chunk}"
    return row(name, conc, plans * 5, elapsed, lat, "event" if chunk == 1 else "batch")


async def _http_client(base: str, prefix: str, plans: int, conc: int) -> tuple[float, list[float]]:
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as client:

        async def call(events: list[EventEnvelope]) -> None:
            response = await client.post("/v1/events", content=events[0].model_dump_json())
            response.raise_for_status()

        return await timed(split(make_plans(prefix, plans), conc), call, 1)


def _http_client_process(base: str, prefix: str, plans: int, conc: int) -> tuple[float, list[float]]:
    return asyncio.run(_http_client(base, prefix, plans, conc))


async def bench_http(base: str, plans: int, conc: int, processes: int = 2) -> dict[str, Any]:
    """One event per request, from `processes` client processes: one Python HTTP client saturates
    near 1,000 requests/s, which would measure the client rather than the gateway."""
    processes = max(1, min(processes, conc))
    loop = asyncio.get_running_loop()
    with concurrent.futures.ProcessPoolExecutor(processes) as pool:
        jobs = [
            loop.run_in_executor(
                pool, _http_client_process, base, f"http{conc}-{k}", plans // processes, conc // processes
            )
            for k in range(processes)
        ]
        done = await asyncio.gather(*jobs)
    elapsed = max(e for e, _ in done)
    latencies = [x for _, lat in done for x in lat]
    events = (plans // processes) * processes * 5
    return row(f"HTTP, 1 event/request ({processes} client procs)", conc, events, elapsed, latencies, "request")


def start_server(url: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "NEXUS_DATABASE_URL": url, "NEXUS_HTTP_PORT": str(port)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nexus.cli", "serve", "--no-dispatcher"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("nexus serve did not start")


async def run_suite(url: str, plans: int, concurrencies: list[int], port: int) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    db = await Database(Settings(database_url=url, db_pool_size=max(concurrencies) + 2)).open(migrate=False)
    server = start_server(url, port)
    try:
        for conc in concurrencies:
            for label, job in (
                ("raw", bench_raw(url, plans, conc)),
                ("submit-1", bench_submit(db, plans, conc, 1)),
                ("submit-batch", bench_submit(db, plans * 4, min(conc, 4), 200)),
                ("http", bench_http(f"http://127.0.0.1:{port}", plans, conc)),
            ):
                result = await job
                results.append(result)
                print(f"  {label:<13} c={conc:<3} {result['events_per_s']:>9,.0f} events/s", flush=True)
    finally:
        server.terminate()
        server.wait(10)
        await db.close()
    return results


def table(results: list[dict[str, Any]]) -> str:
    head = f"| {'scenario':<32} | conc | events | events/s | p50 ms | p99 ms | latency of |"
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in results:
        lines.append(
            f"| {r['scenario']:<32} | {r['concurrency']:>4} | {r['events']:>6} | {r['events_per_s']:>8,.0f} |"
            f" {r['p50_ms']:>6} | {r['p99_ms']:>6} | {r['latency_of']:<10} |"
        )
    floor = {r["concurrency"]: r["events_per_s"] for r in results if r["scenario"].startswith("raw")}
    lines.append("")
    for r in results:
        if not r["scenario"].startswith("raw") and r["concurrency"] in floor:
            lines.append(
                f"- {r['scenario']} c={r['concurrency']}: {r['events_per_s'] / floor[r['concurrency']]:.2f}x floor"
            )
    return "\n".join(lines)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plans", type=int, default=500, help="plans (5 events each) per scenario")
    parser.add_argument("--concurrency", type=int, action="append", help="repeatable (default 1 and 16)")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/gateway.json"))
    parser.add_argument("--port", type=int, default=18080)


def run(args: argparse.Namespace) -> int:
    concurrencies = args.concurrency or [1, 16]
    url = os.environ.get("NEXUS_DATABASE_URL")
    embedded = None
    if url is None:
        embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="nexus-bench-")), cleanup_mode="delete")
        admin = embedded.start()
        name = f"bench_{uuid.uuid4().hex[:8]}"

        async def create() -> None:
            conn = await asyncpg.connect(admin)
            await conn.execute(f"CREATE DATABASE {name}")
            await conn.close()

        asyncio.run(create())
        url = embedded.url(name)

    async def migrate() -> None:
        conn = await asyncpg.connect(url)
        await apply_migrations(conn)
        await conn.close()

    asyncio.run(migrate())
    print(f"nexus bench: {args.plans} plans per scenario, concurrency {concurrencies}", flush=True)
    try:
        results = asyncio.run(run_suite(url, args.plans, concurrencies, args.port))
    finally:
        if embedded is not None:
            embedded.close()
    print()
    print(table(results))
    meta = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0
