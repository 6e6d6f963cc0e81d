"""The decision log's cost in batched `Gateway.submit`: the same workload with the log on and off, same run.

Rounds alternate on/off on one database (fresh orders each round) so machine noise hits both sides alike;
the figure to read is the median ratio. The log is turned off by injecting a log that records nothing,
`Gateway(log=NoDecisionLog())`.

Usage: ``.venv/bin/python benchmarks/decision_log.py [--plans 400] [--rounds 5] [--chunk 200] [--conc 1]``.
PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from nexus.core.decide.items import Incoming
from nexus.core.decide.log import NoDecisionLog
from nexus.core.envelope import EventEnvelope
from nexus.gateway import Gateway
from nexus.store.database import Database
from nexus_lab.bench import admin_postgres, scratch_database
from nexus_lab.bench.scenarios import STEPS, backend_pids, cpu_seconds, make_plans, split, timed


async def one(
    db: Database, log_on: bool, prefix: str, plans: int, chunk: int, conc: int
) -> tuple[float, float, float, float]:
    """events/s, p50 batch ms, and CPU us per event of this process and of PostgreSQL's backends: CPU is
    what the log costs; wall-clock throughput on a shared, loaded machine mostly measures the neighbours."""
    gateway = Gateway(db, log=None if log_on else NoDecisionLog())
    workload = split(make_plans(prefix, plans), conc)

    async def call(events: list[EventEnvelope]) -> None:
        await gateway.submit([Incoming.of(e) for e in events])

    pids = await backend_pids(db)
    cpu_py, cpu_pg = time.process_time(), cpu_seconds(pids)
    elapsed, lat = await timed(workload, call, chunk)
    events = plans * len(STEPS)
    py_us = (time.process_time() - cpu_py) / events * 1e6
    pg_us = (cpu_seconds(pids) - cpu_pg) / events * 1e6
    return events / elapsed, statistics.median(lat) * 1000, py_us, pg_us


async def main(args: argparse.Namespace, admin: str) -> None:
    async with scratch_database(admin, "bench_log", pool_size=max(2, args.conc + 1)) as db:
        await one(db, True, "warm", 50, args.chunk, args.conc)
        on: list[float] = []
        off: list[float] = []
        cpu: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for r in range(args.rounds):
            for log_on in (True, False) if r % 2 == 0 else (False, True):
                rate, p50, py_us, pg_us = await one(db, log_on, f"r{r}{int(log_on)}", args.plans, args.chunk, args.conc)
                (on if log_on else off).append(rate)
                cpu[log_on].append((py_us, pg_us))
                print(
                    f"round {r} log {'on ' if log_on else 'off'}: {rate:9,.0f} events/s  p50 batch {p50:6.2f} ms"
                    f"  CPU/event: gateway {py_us:6.1f} us, postgres {pg_us:6.1f} us"
                )
        for log_on in (True, False):
            py = statistics.median(p for p, _ in cpu[log_on])
            pg = statistics.median(g for _, g in cpu[log_on])
            print(f"median CPU/event, log {'on ' if log_on else 'off'}: gateway {py:.1f} us + postgres {pg:.1f} us")
        rows = await db.fetchval("SELECT count(*) FROM decision_log")
        ratios = [a / b for a, b in zip(on, off, strict=True)]
        print(f"decision_log rows written: {rows}")
        print(
            f"median events/s: log on {statistics.median(on):,.0f}, off {statistics.median(off):,.0f}; "
            f"on/off median ratio {statistics.median(ratios):.2f} (per round: {', '.join(f'{x:.2f}' for x in ratios)})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plans", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=200)
    parser.add_argument("--conc", type=int, default=1)
    arguments = parser.parse_args()
    with admin_postgres() as admin:
        asyncio.run(main(arguments, admin))
