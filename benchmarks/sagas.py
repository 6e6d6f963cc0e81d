"""Sagas per second with the local services (`nexus services`, in process) at several concurrencies, and
the latency a saga adds per effect over the bare HTTP call to the service.

Each saga is a `fulfilment` order whose five steps are submitted at once (steps 3-5 wait, BUFFER, for the
effects before them); it is done when the order is `completed` (four effects: reserve, charge, ship,
invoice). Executors: one task per unit of concurrency, in this process.

Usage: ``.venv/bin/python benchmarks/sagas.py [--sagas 200] [--conc 1,16,64]``.
PostgreSQL: NEXUS_DATABASE_URL (an admin URL able to CREATE DATABASE), else an embedded pgserver.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
import uuid

import httpx

from nexus.gateway import Gateway, Incoming
from nexus.processes import builtin_catalog
from nexus.saga.executor import SagaExecutor
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.agent.reactive import step_envelope
from nexus_lab.bench import create_database, drop_database, start_embedded
from nexus_lab.services import SERVICES, start_services


async def bare_call_ms(url: str, calls: int = 200) -> float:
    """Median ms of one POST to the shipping service with a fresh key (the floor an effect stands on)."""
    times = []
    async with httpx.AsyncClient() as client:
        for _ in range(calls):
            t = time.perf_counter()
            await client.post(url + "/shipping/shipments", json={"order_id": "x"},
                              headers={"Idempotency-Key": uuid.uuid4().hex})  # fmt: skip
            times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


async def run(url: str, services_url: str, conc: int, sagas: int) -> tuple[float, float]:
    """sagas/s and the median ms from submission to completion of one saga."""
    urls = ",".join(f"{n}={services_url}/{n}" for n in SERVICES)
    settings = Settings(database_url=url, service_urls=urls, saga_poll_s=0.005, saga_executors=conc,
                        db_pool_size=min(2 * conc + 4, 90))  # fmt: skip
    db = await Database(settings).open(migrate=False)
    gateway = Gateway(db, catalog=builtin_catalog())
    executor = SagaExecutor(db, gateway, settings, "bench")
    task = asyncio.create_task(executor.run(conc))
    prefix = uuid.uuid4().hex[:6]
    gate = asyncio.Semaphore(conc)
    latencies: list[float] = []

    async def one(i: int) -> None:
        async with gate:
            order, plan = f"b{prefix}-{i}", f"bp{prefix}-{i}"
            t = time.perf_counter()
            await gateway.submit([Incoming.of(step_envelope(order, plan, s)) for s in range(1, 6)])
            while await db.fetchval("SELECT status FROM orders WHERE order_id = $1", order) != "completed":  # noqa: ASYNC110 - polling PostgreSQL, no in-process event to wait on
                await asyncio.sleep(0.002)
            latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(sagas)))
    elapsed = time.perf_counter() - start
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, BaseExceptionGroup):
        await task
    await db.close()
    return sagas / elapsed, statistics.median(latencies) * 1000


async def main(args: argparse.Namespace, admin: str) -> None:
    name = f"bench_saga_{uuid.uuid4().hex[:8]}"
    url = await create_database(admin, name, migrate=True)
    services = await start_services()
    try:
        floor = await bare_call_ms(services.url)
        print(f"bare HTTP call to a service: median {floor:.2f} ms")
        for conc in (int(c) for c in args.conc.split(",")):
            rate, p50 = await run(url, services.url, conc, args.sagas)
            per_effect = p50 / 4
            print(
                f"concurrency {conc:3d}: {rate:7.1f} sagas/s; saga p50 {p50:7.1f} ms = {per_effect:6.1f} ms per effect "
                f"({per_effect - floor:+.1f} ms over the bare call)"
            )
    finally:
        await services.aclose()
        await drop_database(admin, name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sagas", type=int, default=200)
    parser.add_argument("--conc", default="1,16,64")
    embedded = None
    admin = os.environ.get("NEXUS_DATABASE_URL")
    if not admin:
        embedded, admin = start_embedded()
    try:
        asyncio.run(main(parser.parse_args(), admin))
    finally:
        if embedded is not None:
            embedded.close()
