"""Kafka ingress throughput: events/s from produce to applied, against direct `Gateway.submit`, same run.

Three measurements on fresh databases cloned from one migrated template, with the same events:

* **end to end**: the topic starts empty; events are produced keyed by order_id (acks=all, idempotent, one
  ack per event, pipelined) while a `KafkaIngress` consumes them; the clock stops when every event is resolved and
  its offset committed.
* **drain**: the topic is filled first; the clock runs from starting the consumer until the last commit.
  This is the consumer's own rate, without the producer sharing the CPU.
* **direct**: the same raw bytes, parsed with `Incoming.parse` and handed to `Gateway.submit` in batches
  of the poll size, one concurrent stream per partition (orders hashed to partitions as Kafka does), so
  the difference is what Kafka costs: fetching, committing, the poll loop.

Run: `.venv/bin/python benchmarks/kafka_ingress.py --plans 10000 [--record]` with the broker up
(`bash scripts/kafka.sh up`). Without --database-url an embedded PostgreSQL is started in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
import uuid
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.ingress.kafka import KafkaIngress
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres
from nexus_lab.bench import cpu, create_database, kafka_group
from nexus_lab.bench.comparison import machine_line, record_section
from nexus_lab.bench.cpu import ProducerProcess, postmaster_pid, tree_cpu_seconds
from nexus_lab.bench.scenarios import make_plans
from nexus_lab.kafka_admin import delete_topics, ensure_topics

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SECTION = "## Kafka ingress"
PARTITIONS = 4


def plan_bytes(plans: int, tag: str) -> list[tuple[bytes, bytes]]:
    """(key, value) of every step of `plans` five-step plans, plan after plan."""
    return [
        (event.order_id.encode(), event.model_dump_json().encode())
        for plan in make_plans(f"bench-{tag}", plans)
        for event in plan
    ]


class Databases:
    """Fresh migrated databases on one server (embedded unless a URL is given)."""

    def __init__(self, url: str | None) -> None:
        self.embedded: EmbeddedPostgres | None = None
        if url is None:
            self.embedded = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="nexus-bench-")), cleanup_mode="delete")
            url = self.embedded.start()
        self.admin_url = url

    async def fresh(self) -> str:
        return await create_database(self.admin_url, f"bench_{uuid.uuid4().hex[:10]}", migrate=True)

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.close()


async def produce(settings: Settings, records: list[tuple[bytes, bytes]]) -> float:
    """Publish the records keyed by order_id, as agents do (`nexus_lab.bench.cpu.produce`)."""
    return await cpu.produce(settings, records)


async def consume_until(ingress: KafkaIngress, total: int, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while sum(ingress.commits.committed.values()) < total:
        if time.monotonic() > deadline:
            raise TimeoutError(f"consumed {sum(ingress.commits.committed.values())}/{total} in {limit_s}s")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def _bench_topics(base: Settings, dbs: Databases) -> AsyncIterator[Settings]:
    """Settings with a fresh database and a topic, DLQ topic and group of one run's own (topics deleted after)."""
    tag = uuid.uuid4().hex[:8]
    s = base.replace(
        database_url=await dbs.fresh(),
        kafka_topic=f"nexus.bench.{tag}",
        kafka_dlq_topic=f"nexus.bench.{tag}.dlq",
        kafka_group=f"nexus-bench-{tag}",
    )
    # a replica on every broker the bootstrap names (three on a cluster, min.insync.replicas 2 there)
    replication = len(s.kafka_bootstrap.split(","))
    await ensure_topics(
        s.kafka_bootstrap, [s.kafka_topic, s.kafka_dlq_topic], partitions=PARTITIONS, replication=replication
    )
    try:
        yield s
    finally:
        await delete_topics(s.kafka_bootstrap, [s.kafka_topic, s.kafka_dlq_topic])


async def kafka_run_processes(
    base: Settings, dbs: Databases, records: list[tuple[bytes, bytes]], *, poll: int, producer: ProducerProcess,
    consumers: int, command: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """produce -> applied with the consumer group made of `consumers` gateway processes (as that many
    `nexus serve --kafka` would be, started with `command`), each with its own pool; CPU seconds summed."""
    async with _bench_topics(base, dbs) as s:
        return await kafka_group.run(
            s, records, poll=poll, producer=producer, consumers=consumers, partitions=PARTITIONS, command=command
        )


async def kafka_run(
    base: Settings, dbs: Databases, records: list[tuple[bytes, bytes]], *, prefill: bool, poll: int,
    producer: ProducerProcess | None = None,
) -> dict[str, float]:  # fmt: skip
    """One run; with a `producer` process the events are produced there (else in this process). CPU seconds
    of this process (consumer and gateway, plus the producer if here), the producer's and PostgreSQL's."""
    async with _bench_topics(base, dbs) as s:
        return await _kafka_run(s, records, prefill=prefill, poll=poll, producer=producer)


async def _kafka_run(
    s: Settings, records: list[tuple[bytes, bytes]], *, prefill: bool, poll: int, producer: ProducerProcess | None
) -> dict[str, float]:
    db = await Database(s).open(migrate=False)
    postmaster = await postmaster_pid(s.database_url or "")
    try:
        produce_s = await produce(s, records) if prefill else 0.0
        ingress = KafkaIngress(Gateway(db, record_plan_mismatch=False), s)
        ingress.max_records = poll
        start = time.perf_counter()
        task = asyncio.create_task(ingress.run())
        cpu = time.process_time()
        producer_cpu = pg_cpu = 0.0
        if not prefill:
            # produce -> applied: the clock starts when the consumer is in its group and the first event goes
            async with asyncio.timeout(60):
                await ingress.assigned.wait()
            start = time.perf_counter()
            cpu = time.process_time()
            pg_cpu = tree_cpu_seconds(postmaster) if postmaster else 0.0
            if producer is not None:
                (produce_s, producer_cpu), _ = await asyncio.gather(
                    producer.produce(s, records), consume_until(ingress, len(records), 600)
                )
            else:
                produce_s = await produce(s, records)
        await consume_until(ingress, len(records), limit_s=600)
        elapsed = time.perf_counter() - start
        consumer_cpu = time.process_time() - cpu
        pg_cpu = (tree_cpu_seconds(postmaster) - pg_cpu) if postmaster and not prefill else 0.0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        applied = await db.fetchval("SELECT count(*) FROM outbox")
        assert applied == len(records), f"{applied} applied of {len(records)}"
    finally:
        await db.close()
    return {"seconds": elapsed, "produce_seconds": produce_s, "rate": len(records) / elapsed,
            "cpu_consumer_s": consumer_cpu, "cpu_producer_s": producer_cpu, "cpu_postgres_s": pg_cpu}  # fmt: skip


async def direct_run(
    base: Settings, dbs: Databases, records: list[tuple[bytes, bytes]], batch: int
) -> dict[str, float]:
    s = base.replace(database_url=await dbs.fresh())
    streams: list[list[bytes]] = [[] for _ in range(PARTITIONS)]
    for key, value in records:
        streams[zlib.crc32(key) % PARTITIONS].append(value)
    db = await Database(s).open(migrate=False)
    gateway = Gateway(db, record_plan_mismatch=False)

    async def stream(values: list[bytes]) -> None:
        for i in range(0, len(values), batch):
            await gateway.submit([Incoming.parse(v) for v in values[i : i + batch]], source="kafka")

    try:
        start = time.perf_counter()
        await asyncio.gather(*(stream(v) for v in streams))
        elapsed = time.perf_counter() - start
        applied = await db.fetchval("SELECT count(*) FROM outbox")
        assert applied == len(records), f"{applied} applied of {len(records)}"
    finally:
        await db.close()
    return {"seconds": elapsed, "rate": len(records) / elapsed}


async def main(args: argparse.Namespace) -> None:
    settings = Settings.from_env(db_pool_size=10).replace(
        kafka_bootstrap=args.bootstrap or Settings.from_env().kafka_bootstrap
    )
    dbs = Databases(args.database_url)
    try:
        records = plan_bytes(args.plans, uuid.uuid4().hex[:6])
        n = len(records)
        direct = await direct_run(settings, dbs, records, args.poll)
        drain = await kafka_run(settings, dbs, records, prefill=True, poll=args.poll)
        e2e = await kafka_run(settings, dbs, records, prefill=False, poll=args.poll)
    finally:
        dbs.close()
    rows = [
        ("direct Gateway.submit", direct["rate"], direct["seconds"], 1.0),
        ("Kafka drain (pre-filled topic)", drain["rate"], drain["seconds"], drain["rate"] / direct["rate"]),
        ("Kafka produce -> applied", e2e["rate"], e2e["seconds"], e2e["rate"] / direct["rate"]),
    ]
    cmd = f".venv/bin/python benchmarks/kafka_ingress.py --plans {args.plans} --poll {args.poll}"
    lines = [
        SECTION,
        "",
        f"{machine_line()}, PostgreSQL 16 ({'embedded' if args.database_url is None else 'given URL'}) and the "
        "local Kafka broker on the same machine. "
        f"{args.plans} plans = {n} events, {PARTITIONS} partitions, poll/batch size {args.poll}.",
        "",
        f"Command: `{cmd}`",
        "",
        "| path | events/s | seconds | vs direct |",
        "|---|---:|---:|---:|",
        *[f"| {name} | {rate:,.0f} | {secs:.2f} | {ratio:.2f} |" for name, rate, secs, ratio in rows],
        "",
        f"Producing alone (acks=all, idempotent, one ack per event, pipelined): {n / e2e['produce_seconds']:,.0f} "
        f"events/s in the end-to-end run, {n / drain['produce_seconds']:,.0f} events/s when filling the topic. "
        "Commit/poll overhead of the Kafka path versus direct submit: "
        f"{(1 - drain['rate'] / direct['rate']) * 100:.0f}% (drain), "
        f"{(1 - e2e['rate'] / direct['rate']) * 100:.0f}% (end to end, producer in the same process).",
    ]
    print("\n".join(lines))
    if args.record:
        record_section(RESULTS, lines)
        print(f"\nrecorded in {RESULTS}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=10_000)
    parser.add_argument("--poll", type=int, default=2000, help="max records per poll (and direct batch size)")
    parser.add_argument("--database-url", default=os.environ.get("NEXUS_DATABASE_URL"))
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--record", action="store_true", help=f"write the '{SECTION}' section of RESULTS.md")
    asyncio.run(main(parser.parse_args()))
