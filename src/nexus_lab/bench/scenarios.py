"""The in-process scenarios of `nexus bench`: the raw-SQL floor, `Gateway.submit`, and HTTP ingress.

Each runs one plan's five steps in order per order, many orders at once: `concurrency` streams, orders
hashed to streams, so two streams never touch the same order (as the gateway's own partitioning does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import os
import statistics
import subprocess
import tempfile
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg

from nexus.core import definitions
from nexus.core.decide.items import Incoming
from nexus.core.decide.validation import NoChecks
from nexus.core.envelope import EventEnvelope
from nexus.gateway import Gateway
from nexus.processes import shipped
from nexus.store.database import Database
from nexus_lab.procs import NEXUS_CMD, Proc, wait_http

UNLIMITED_KEY = {"NEXUS_RATE_LIMIT_AGENT": "0", "NEXUS_RATE_LIMIT_TENANT": "0"}
"""The environment of a gateway a bench starts: it measures the gateway's capacity, not the per-key limit of
its one key (2,000 agent requests/s by default, which one gateway on two cores exceeds) nor its tenant's
(4,000 units/s)."""

# The floor: the gateway's writes for one in-order step, by hand, one transaction per event.
RAW_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
RAW_READ = "SELECT last_seq FROM orders WHERE order_id = $1"
RAW_UPSERT = (
    "INSERT INTO orders (order_id, plan_id, status, last_seq, outbox_count) VALUES ($1, $2, $3, $4, $4)"
    " ON CONFLICT (tenant_id, order_id) DO UPDATE SET status = EXCLUDED.status, last_seq = EXCLUDED.last_seq,"
    " outbox_count = EXCLUDED.outbox_count, updated_at = now()"
)
RAW_OUTBOX = (
    "INSERT INTO outbox (id, order_id, position, event_id, event_type, seq_id, plan_id, payload)"
    " VALUES ($1, $2, $3, $4, $5, $3, $6, $7::jsonb)"
)

Row = dict[str, Any]
# The order process's plan (processes/order.yaml), each order's steps in order.
STEPS = definitions.main_plan(shipped("order"))


_ITEMS = [
    {"product_id": "prod_a", "quantity": 2, "unit_price": "3.50"},
    {"product_id": "prod_b", "quantity": 1, "unit_price": "3.00"},
]
# An honest plan's data: every check of the order process has something real to compare.
_BENCH_DATA: dict[int, dict[str, Any]] = {
    1: {"user_id": "u1", "items": _ITEMS, "total_amount": "10.00", "currency": "USD"},
    2: {"warehouse_id": "wh", "reserved_items": _ITEMS},
    3: {"payment_id": "pay", "amount": "10.00", "currency": "USD"},
}


def make_plans(prefix: str, plans: int) -> list[list[EventEnvelope]]:
    now = dt.datetime.now(dt.UTC)
    return [
        [
            EventEnvelope(
                event_id=uuid.uuid4(),
                event_type=t,
                plan_id=f"{prefix}-plan-{i}",
                order_id=f"{prefix}-{i}",
                seq_id=n,
                timestamp=now,
                data=_BENCH_DATA.get(n, {}),
            )
            for n, t in enumerate(STEPS, start=1)
        ]
        for i in range(plans)
    ]


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
        events = [plan[s] for s in range(len(STEPS)) for plan in plans]
        for lo in range(0, len(events), chunk):
            t = time.perf_counter()
            await call(events[lo : lo + chunk])
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(worker(p) for p in parts))
    return time.perf_counter() - start, latencies


def percentile(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def row(
    suite: str, name: str, conc: int, events: int, elapsed: float, lat: Sequence[float], unit: str = "event"
) -> Row:
    """One result; latencies in seconds, reported in ms (p50/p95/p99 of whatever `unit` is timed)."""
    s = sorted(lat)
    return {
        "suite": suite,
        "scenario": name,
        "concurrency": conc,
        "events": events,
        "seconds": round(elapsed, 3),
        "events_per_s": round(events / elapsed, 1),
        "p50_ms": round(statistics.median(s) * 1000, 2) if s else None,
        "p95_ms": round(percentile(s, 0.95) * 1000, 2) if s else None,
        "p99_ms": round(percentile(s, 0.99) * 1000, 2) if s else None,
        "latency_of": unit,
    }


async def raw_write_values(
    conn: asyncpg.Connection, order_id: str, plan_id: str, seq_id: int, event_id: uuid.UUID, event_type: str,
    payload: str,
) -> None:  # fmt: skip
    """The floor's one transaction for one event; the DBOS peer's step does the same."""
    async with conn.transaction():
        await conn.execute(RAW_LOCK, order_id)
        await conn.fetchval(RAW_READ, order_id)
        await conn.execute(RAW_UPSERT, order_id, plan_id, "created", seq_id)
        await conn.execute(RAW_OUTBOX, uuid.uuid4(), order_id, seq_id, event_id, event_type, plan_id, payload)


async def raw_write(conn: asyncpg.Connection, e: EventEnvelope) -> None:
    await raw_write_values(
        conn, e.order_id, e.plan_id, e.seq_id or 0, e.event_id, str(e.event_type), e.model_dump_json()
    )


async def bench_raw(url: str, plans: int, conc: int) -> Row:
    pool = await asyncpg.create_pool(url, min_size=conc, max_size=conc)
    try:

        async def call(events: list[EventEnvelope]) -> None:
            for e in events:
                async with pool.acquire() as conn:
                    await raw_write(conn, e)

        elapsed, lat = await timed(split(make_plans(f"raw{conc}", plans), conc), call, 1)
        return row("raw", "raw SQL floor (1 tx/event)", conc, plans * len(STEPS), elapsed, lat)
    finally:
        await pool.close()


async def bench_submit(db: Database, plans: int, conc: int, chunk: int, *, validate: bool = True) -> Row:
    gateway = Gateway(db, checks=None if validate else NoChecks())

    async def call(events: list[EventEnvelope]) -> None:
        await gateway.submit([Incoming.of(e) for e in events])

    elapsed, lat = await timed(split(make_plans(f"sub{conc}x{chunk}", plans), conc), call, chunk)
    if chunk == 1:
        return row("submit", "Gateway.submit, 1 event/call", conc, plans * len(STEPS), elapsed, lat)
    label = f"Gateway.submit, batches of {chunk}" + ("" if validate else ", process validation off")
    return row("submit", label, conc, plans * len(STEPS), elapsed, lat, "batch")


async def _http_client(base: str, prefix: str, plans: int, conc: int) -> tuple[float, list[float], float]:
    # The load generator is aiohttp (bench extra), not httpx: on these 2 cores an httpx client process
    # needs more CPU per request than the gateway does and capped the measurement near 1,500 requests/s
    # (same server, side by side: httpx 1,521 vs aiohttp 2,674 events/s at c=16).
    import aiohttp

    from nexus_client import ClientConfig

    headers = {"content-type": "application/json", **ClientConfig.from_env().headers()}
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        base, connector=aiohttp.TCPConnector(limit=conc), timeout=timeout, headers=headers
    ) as client:

        async def call(events: list[EventEnvelope]) -> None:
            async with client.post("/v1/events", data=events[0].model_dump_json()) as response:
                await response.read()
                response.raise_for_status()

        cpu = time.process_time()
        elapsed, lat = await timed(split(make_plans(prefix, plans), conc), call, 1)
        return elapsed, lat, time.process_time() - cpu


def _http_client_process(base: str, prefix: str, plans: int, conc: int) -> tuple[float, list[float], float]:
    return asyncio.run(_http_client(base, prefix, plans, conc))


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of live processes (Linux /proc), 0 for any that is gone."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115 - a one-line read of a /proc file
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


async def backend_pids(db: Database) -> list[int]:
    """The PostgreSQL backends connected to the bench database (the server's pool and ours)."""
    rows = await db.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    return [int(r["pid"]) for r in rows]


async def bench_http(
    base: str, plans: int, conc: int, *, server_pid: int | None, db: Database, processes: int = 2
) -> Row:
    """One event per request, from `processes` client processes, so that the measurement is of the
    gateway rather than of one client process's CPU. Also reports the CPU used
    by the server, the PostgreSQL backends of the bench database and the clients, as % of one core."""
    processes = max(1, min(processes, conc))
    loop = asyncio.get_running_loop()
    pg = await backend_pids(db)
    watched = [*pg, *([server_pid] if server_pid else [])]
    before = {pid: cpu_seconds([pid]) for pid in watched}
    with concurrent.futures.ProcessPoolExecutor(processes) as pool:
        jobs = [
            loop.run_in_executor(
                pool,
                _http_client_process,
                base,
                f"http{conc}-{k}-{uuid.uuid4().hex[:6]}",
                plans // processes,
                conc // processes,
            )
            for k in range(processes)
        ]
        done = await asyncio.gather(*jobs)
    elapsed = max(e for e, _, _ in done)
    result = row(
        "http",
        "HTTP, 1 event/request",
        conc,
        (plans // processes) * processes * len(STEPS),
        elapsed,
        [x for _, lat, _ in done for x in lat],
        "request",
    )
    # Pools open connections lazily: a backend born during the run spent all its CPU in it.
    pg = sorted(set(pg) | set(await backend_pids(db)))
    spent = {pid: cpu_seconds([pid]) - before.get(pid, 0.0) for pid in {*pg, *watched}}
    result["cpu_pct"] = {
        "server": round(spent[server_pid] / elapsed * 100, 1) if server_pid else None,
        # Without our own server the backends we see are not the ones doing its work.
        "postgres": round(sum(spent[p] for p in pg) / elapsed * 100, 1) if server_pid else None,
        "clients": round(sum(c for _, _, c in done) / elapsed * 100, 1),
    }
    return result


def start_server(url: str, port: int, command: Sequence[str] | None = None) -> subprocess.Popen[bytes]:
    """`nexus serve` (HTTP + group commit, no dispatcher) on the bench database, ready to answer; `command`
    starts another build's gateway instead (e.g. the previous commit's, for a same-run comparison). Ready means
    its /healthz answers and the port is its own; a process that exits first fails at once, with its output."""
    env = {
        **UNLIMITED_KEY,  # unless the caller's environment sets it
        **os.environ,
        "NEXUS_DATABASE_URL": url,
        "NEXUS_HTTP_PORT": str(port),
        "NEXUS_LOG_LEVEL": "WARNING",
    }
    log = Path(tempfile.mkdtemp(prefix="nexus-bench-")) / "serve.log"
    proc = Proc("nexus serve", list(command or [*NEXUS_CMD, "serve", "--no-dispatcher"]), env, log).start()
    assert proc.proc is not None
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=120, proc=proc)  # a loaded machine starts Python slowly
    except (TimeoutError, RuntimeError) as exc:
        proc.kill()
        raise RuntimeError(f"nexus serve did not start: {exc}") from None
    return proc.proc
