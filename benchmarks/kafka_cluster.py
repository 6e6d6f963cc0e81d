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
import os
import statistics
import uuid

import kafka_ingress  # benchmarks/ is the script's directory, first on sys.path

from nexus.settings import Settings
from nexus_lab.bench.comparison import machine_line, run_comparison, scratch
from nexus_lab.chaos.kafka_cluster import KafkaCluster

SECTION = "## Kafka: three brokers vs one"


async def main(args: argparse.Namespace) -> list[str]:
    clusters: dict[int, KafkaCluster] = {}
    rates: dict[int, list[float]] = {1: [], 3: []}
    records = kafka_ingress.plan_bytes(args.plans, uuid.uuid4().hex[:6])
    with scratch("nexus-kafka-bench-") as directory:
        dbs = kafka_ingress.Databases(args.database_url)
        try:
            for n in (1, 3):  # one after the other: each takes the first free ports after the other's
                clusters[n] = KafkaCluster(directory / f"brokers-{n}", topics=("nexus.events",), brokers=n)
                await clusters[n].up()
            settings = Settings.from_env(db_pool_size=10)
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
    one, three = statistics.median(rates[1]), statistics.median(rates[3])
    return [
        SECTION,
        "",
        f"{machine_line()}, PostgreSQL 16 embedded, the brokers, the producer and the consumer on the same "
        "machine, which other work was loading: compare the ratio, not the rates. "
        f"{args.plans} plans = {len(records)} events, "
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
    run_comparison(
        __doc__,
        SECTION,
        main,
        kafka_ingress.RESULTS,
        plans=1000,
        poll=2000,
        database_url=os.environ.get("NEXUS_DATABASE_URL"),
    )
