"""The peer baseline: DBOS Transact on the same PostgreSQL, one durable workflow per order, one step per event.

What a user would write instead of the gateway for this job: each order's plan is a DBOS workflow, each
event a `@DBOS.step` doing the same business write as the raw-SQL floor (advisory lock, read, upsert the
order row, insert an outbox row) in one transaction on the bench database; DBOS checkpoints the workflow
and every step's output in its system database (`dbos` schema, its own database on the same server).

Runs in its own process (DBOS is a process-wide singleton with background threads), started by
`nexus bench`: ``python -m nexus_lab.bench.peer_dbos --url URL --system-url URL --plans N --concurrency C...``.
Prints one JSON result per concurrency on stdout as it finishes.

Latency of an event: from the previous event's step returning (for the first, from starting the
workflow) to its own step returning, checkpoint included; throughput counts the workflow's start and
end writes too. ``concurrency`` is the number of workflows in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import sys
import time
import uuid
from collections import defaultdict

import asyncpg
from dbos import DBOS, DBOSConfig

from nexus.core.envelope import EventEnvelope
from nexus_lab.bench.scenarios import make_plans, raw_write_values, row, split

Event = tuple[str, str, int, str, str, str]  # order_id, plan_id, seq_id, event_id, event_type, payload

_pool: asyncpg.Pool | None = None
# perf_counter after each step of each running workflow, keyed by order id (one workflow per order).
_marks: defaultdict[str, list[float]] = defaultdict(list)


@DBOS.step()
async def apply_event(event: Event) -> int:
    """One event's business write, one transaction: the floor's four statements."""
    assert _pool is not None
    order_id, plan_id, seq_id, event_id, event_type, payload = event
    async with _pool.acquire() as conn:
        await raw_write_values(conn, order_id, plan_id, seq_id, uuid.UUID(event_id), event_type, payload)
    return seq_id


@DBOS.workflow()
async def order_workflow(order_id: str, events: list[Event]) -> int:
    """One order's plan: its steps in order, each exactly where the last checkpoint left off on recovery."""
    for event in events:
        await apply_event(event)
        _marks[order_id].append(time.perf_counter())
    return len(events)


def _event(e: EventEnvelope) -> Event:
    return (e.order_id, e.plan_id, e.seq_id or 0, str(e.event_id), str(e.event_type), e.model_dump_json())


async def bench_peer(url: str, plans: int, conc: int) -> dict[str, object]:
    global _pool
    _pool = await asyncpg.create_pool(url, min_size=conc, max_size=conc)
    latencies: list[float] = []

    async def worker(orders: list[list[EventEnvelope]]) -> None:
        for plan in orders:
            order_id = plan[0].order_id
            t0 = time.perf_counter()
            handle = await DBOS.start_workflow_async(order_workflow, order_id, [_event(e) for e in plan])
            await handle.get_result()
            marks = [t0, *_marks.pop(order_id)]
            latencies.extend(b - a for a, b in itertools.pairwise(marks))

    try:
        parts = split(make_plans(f"dbos{conc}-{uuid.uuid4().hex[:6]}", plans), conc)
        start = time.perf_counter()
        await asyncio.gather(*(worker(p) for p in parts))
        elapsed = time.perf_counter() - start
    finally:
        await _pool.close()
        _pool = None
    return row("peer", "DBOS Transact (workflow/order, step/event)", conc, len(latencies), elapsed, latencies)


async def main(args: argparse.Namespace) -> None:
    for conc in args.concurrency:
        print(json.dumps(await bench_peer(args.url, args.plans, conc)), flush=True)


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", required=True, help="the bench database (nexus schema applied)")
    parser.add_argument("--system-url", required=True, help="DBOS system database (created if missing)")
    parser.add_argument("--plans", type=int, default=500)
    parser.add_argument("--concurrency", type=int, action="append", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    config: DBOSConfig = {
        "name": "nexus-bench-peer",
        "system_database_url": args.system_url,
        "sys_db_pool_size": max(args.concurrency) + 8,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    try:
        asyncio.run(main(args))
    finally:
        DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(cli())
