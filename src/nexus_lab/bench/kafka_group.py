"""Produce -> applied with the consumer group made of several gateway processes.

Partitions are how a Kafka consumer group spreads its work: each gateway process (`nexus serve --kafka`)
owns some of them. `benchmarks/kafka_ingress.py` runs its consumer in its own process; this module runs
`consumers` of them, each a process of its own with its own pool, and stops the clock when the group has
committed every record. Lives in the package (not the script) because spawned processes import it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import multiprocessing
import os
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from nexus.gateway import Gateway, Incoming
from nexus.ingress.kafka import KafkaIngress
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.bench.cpu import ProducerProcess, postmaster_pid, tree_cpu_seconds


class TimedGateway(Gateway):
    """`Gateway.submit` that records how long each call took (one lane batch, or one partition slice, per call)."""

    latencies: list[float] = []

    async def submit(self, items: Sequence[Incoming], *, source: str = "http") -> list[Any]:
        t = time.perf_counter()
        try:
            return await super().submit(items, source=source)
        finally:
            TimedGateway.latencies.append(time.perf_counter() - t)


async def _report(ingress: KafkaIngress, owned: Any) -> None:
    while True:
        owned[os.getpid()] = len(ingress.owned)
        await asyncio.sleep(0.05)


async def _consume(settings: Settings, poll: int, ready: Any, stop: Any, owned: Any) -> dict[str, Any]:
    """One gateway process's consumer: joins the group, says so on `ready`, keeps `owned[pid]` at the number
    of partitions it owns, consumes until `stop` is set."""
    db = await Database(settings).open(migrate=False)
    TimedGateway.latencies = []
    ingress = KafkaIngress(TimedGateway(db, record_plan_mismatch=False), settings)
    ingress.max_records = poll
    task = asyncio.create_task(ingress.run())
    try:
        await asyncio.wait_for(ingress.assigned.wait(), 60)
        cpu = time.process_time()
        reporter = asyncio.create_task(_report(ingress, owned))
        ready.put(os.getpid())
        await asyncio.to_thread(stop.wait)
        reporter.cancel()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return {"cpu_s": time.process_time() - cpu, "latencies": TimedGateway.latencies}
    finally:
        task.cancel()
        await db.close()


def _consumer_process(settings: Settings, poll: int, ready: Any, stop: Any, owned: Any) -> dict[str, Any]:
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    return asyncio.run(_consume(settings, poll, ready, stop, owned))


async def _settled(owned: Any, consumers: int, partitions: int) -> None:
    """Until every partition is owned and spread evenly: the rebalance the last member's join started is
    over (the first members learn of it only at their next heartbeat)."""
    deadline = time.monotonic() + 60
    while True:
        counts = list(owned.values())
        if len(counts) == consumers and sum(counts) == partitions and max(counts) - min(counts) <= 1:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the group did not settle: {counts} of {partitions} partitions")
        await asyncio.sleep(0.05)


async def committed_total(admin: AIOKafkaAdminClient, group: str, topic: str) -> int:
    """The sum of the group's committed offsets on `topic` (records resolved and committed)."""
    offsets: dict[TopicPartition, Any] = await admin.list_consumer_group_offsets(group)
    return sum(meta.offset for tp, meta in offsets.items() if tp.topic == topic and meta.offset > 0)


async def run(
    s: Settings,
    records: list[tuple[bytes, bytes]],
    *,
    poll: int,
    producer: ProducerProcess,
    consumers: int,
    partitions: int,
) -> dict[str, Any]:
    """Produce `records` to `s.kafka_topic` (already created) while `consumers` gateway processes consume it
    in group `s.kafka_group` into `s.database_url` (fresh and migrated); the clock runs from the first send,
    once every consumer is in the group, to the last commit."""
    postmaster = await postmaster_pid(s.database_url or "")
    spawn = multiprocessing.get_context("spawn")
    manager = spawn.Manager()
    ready, stop, owned = manager.Queue(), manager.Event(), manager.dict()
    pool = concurrent.futures.ProcessPoolExecutor(consumers, mp_context=spawn)
    loop = asyncio.get_running_loop()
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    try:
        futures = [loop.run_in_executor(pool, _consumer_process, s, poll, ready, stop, owned) for _ in range(consumers)]
        for _ in range(consumers):
            await loop.run_in_executor(None, ready.get, True, 120)
        await _settled(owned, consumers, partitions)
        start = time.perf_counter()
        pg_cpu = tree_cpu_seconds(postmaster) if postmaster else 0.0
        producing = asyncio.create_task(producer.produce(s, records))
        deadline = time.monotonic() + 600
        while await committed_total(admin, s.kafka_group, s.kafka_topic) < len(records):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not all of {len(records)} committed in 600 s")
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - start
        pg_cpu = (tree_cpu_seconds(postmaster) - pg_cpu) if postmaster else 0.0
        produce_s, producer_cpu = await producing
        stop.set()
        results = await asyncio.gather(*futures)
        db = await Database(s).open(migrate=False)
        try:
            applied = await db.fetchval("SELECT count(*) FROM outbox")
        finally:
            await db.close()
        assert applied == len(records), f"{applied} applied of {len(records)}"
    finally:
        stop.set()
        await admin.close()
        pool.shutdown()
        manager.shutdown()
    return {
        "seconds": elapsed,
        "produce_seconds": produce_s,
        "rate": len(records) / elapsed,
        "cpu_consumer_s": sum(r["cpu_s"] for r in results),
        "cpu_producer_s": producer_cpu,
        "cpu_postgres_s": pg_cpu,
        "latencies": [x for r in results for x in r["latencies"]],
    }
