"""Process CPU per event of the HTTP path's own work without HTTP: wrk's envelopes parsed as
`POST /v1/events` parses them (`events_body.parse_body`, the tenant binding), then `Gateway.submit` in
fixed batches on a real PostgreSQL, as the group commit submits them under wrk. Steadier than the wrk
suite on a shared machine (no sockets, no scheduling of wrk or uvicorn); it leaves out the HTTP server.

Run with a tree's sources first on the path, against an admin URL (else a throwaway embedded server):
``NEXUS_DATABASE_URL=<admin url> PYTHONPATH=<tree>/src .venv/bin/python benchmarks/submit_cpu.py
[--orders 400] [--batch 32] [--rounds 3]``. Prints microseconds of process CPU per event per round.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from nexus.gateway import Gateway
from nexus.ingress import tenants
from nexus.ingress.events_body import Parsed, limits_of, parse_body
from nexus.settings import Settings
from nexus_lab.bench import admin_postgres, scratch_database

STEPS = ("OrderCreated", "InventoryValidated", "PaymentProcessed", "OrderShipped", "OrderCompleted")
ITEMS = (
    '[{"product_id":"prod_a","quantity":2,"unit_price":"3.50"},'
    '{"product_id":"prod_b","quantity":1,"unit_price":"3.00"}]'
)
DATA = {  # as bench/wrk_orders.lua sends them
    1: '{"user_id":"u1","items":' + ITEMS + ',"total_amount":"10.00","currency":"USD"}',
    2: '{"warehouse_id":"wh","reserved_items":' + ITEMS + "}",
    3: '{"payment_id":"pay","amount":"10.00","currency":"USD"}',
}


def body(run: str, order: int, seq: int) -> bytes:
    order_id = f"cpu-{run}-{order}"
    return (
        f'{{"event_id":"{run}-{order % 65536:04x}-4000-8000-{seq * 100000 + order:012x}",'
        f'"event_type":"{STEPS[seq - 1]}","plan_id":"{order_id}-plan","order_id":"{order_id}","seq_id":{seq},'
        f'"timestamp":"2026-12-01T10:00:00Z","schema_version":"1.0","data":{DATA.get(seq, "{}")}}}'
    ).encode()


async def measure(admin: str, orders: int, batch: int, rounds: int) -> list[float]:
    limits = limits_of(Settings())
    results = []
    async with scratch_database(admin, "submit_cpu", pool_size=4) as db:
        gateway = Gateway(db)
        for r in range(rounds + 1):  # the first round warms the pool and the statement caches
            run = f"{r:08x}"
            bodies = [body(run, o, seq) for seq in range(1, 6) for o in range(orders)]
            started = time.process_time()
            for i in range(0, len(bodies), batch):
                items = []
                for raw in bodies[i : i + batch]:
                    parsed = parse_body(raw, None, limits)
                    assert isinstance(parsed, Parsed)
                    items += [tenants.bind(it, "default", "key:bench", "bench") for it in parsed.items]
                outcomes = await gateway.submit([i for i in items if i is not None])
                assert all(o.decision.value == "APPLY" for o in outcomes), outcomes[:2]
            if r:
                results.append((time.process_time() - started) / len(bodies) * 1e6)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--orders", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with admin_postgres() as admin:
        results = asyncio.run(measure(admin, args.orders, args.batch, args.rounds))
    print(f"us of process CPU per event: {[round(x) for x in results]}, best {min(results):.0f}")


if __name__ == "__main__":
    main()
