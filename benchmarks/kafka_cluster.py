"""Kafka ingress on a three-broker cluster against one broker, same run: events/s from produce to applied.

Two brokers' homes of their own (`scripts/kafka.sh` in scratch `NEXUS_KAFKA_HOME`s on ports below the ephemeral
range, never the shared broker): one broker, and `NEXUS_KAFKA_BROKERS=3` (topics of three replicas,
min.insync.replicas 2). The same events are produced (acks=all, idempotent) and consumed by one `KafkaIngress`
into a fresh database for each run (`benchmarks/kafka_ingress.py`'s end-to-end measurement), alternating one
broker and three, `--rounds` times each; the median rate of each and their ratio are printed.

Run: `.venv/bin/python benchmarks/kafka_cluster.py --plans 1000 --rounds 2 [--record]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import kafka_ingress  # benchmarks/ is the script's directory, first on sys.path

from nexus.settings import Settings
from nexus_lab.chaos.kafka_cluster import KafkaCluster

SECTION = "## Kafka: three brokers vs one"


async def main(args: argparse.Namespace) -> list[str]:
    scratch = Path(tempfile.mkdtemp(prefix="nexus-kafka-bench-"))
    clusters: dict[int, KafkaCluster] = {}
    dbs = kafka_ingress.Databases(args.database_url)
    rates: dict[int, list[float]] = {1: [], 3: []}
    try:
        for n in (1, 3):  # one after the other: each takes the first free ports after the other's
            clusters[n] = KafkaCluster(scratch / f"brokers-{n}", topics=("nexus.events",), brokers=n)
            await clusters[n].up()
        settings = Settings.from_env(db_pool_size=10)
        records = kafka_ingress.plan_bytes(args.plans, uuid.uuid4().hex[:6])
        for _ in range(args.rounds):
            for brokers, cluster in clusters.items():
                run = await kafka_ingress.kafka_run(
                    settings.replace(kafka_bootstrap=cluster.bootstrap), dbs, records, prefill=False, poll=args.poll
                )
                rates[brokers].append(run["rate"])
                print(f"{brokers} broker(s): {run['rate']:,.0f} events/s", flush=True)
    finally:
        dbs.close()
        for cluster in clusters.values():
            cluster.close()
        shutil.rmtree(scratch, ignore_errors=True)
    one, three = statistics.median(rates[1]), statistics.median(rates[3])
    return [
        SECTION,
        "",
        f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({platform.machine()}, {platform.python_version()}), "
        "PostgreSQL 16 embedded, the brokers, the producer and the consumer on the same machine, which other work "
        f"was loading: compare the ratio, not the rates. {args.plans} plans = {len(records)} events, "
        f"{kafka_ingress.PARTITIONS} partitions, poll {args.poll}, {args.rounds} round(s) each, alternating.",
        "",
        f"Command: `.venv/bin/python benchmarks/kafka_cluster.py --plans {args.plans} --rounds {args.rounds}`",
        "",
        "| brokers | replication, min.insync.replicas | events/s produce -> applied (median) | runs |",
        "|---:|---|---:|---|",
        f"| 1 | 1, 1 | {one:,.0f} | {', '.join(f'{r:,.0f}' for r in rates[1])} |",
        f"| 3 | 3, 2 | {three:,.0f} | {', '.join(f'{r:,.0f}' for r in rates[3])} |",
        "",
        f"Three brokers / one: {three / one:.2f}x.",
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--poll", type=int, default=2000)
    parser.add_argument("--database-url", default=os.environ.get("NEXUS_DATABASE_URL"))
    parser.add_argument("--record", action="store_true", help=f"write the '{SECTION}' section of RESULTS.md")
    arguments = parser.parse_args()
    lines = asyncio.run(main(arguments))
    print("\n".join(lines))
    if arguments.record:
        kafka_ingress.SECTION = SECTION
        kafka_ingress.record(lines)
        print(f"\nrecorded in {kafka_ingress.RESULTS}")
