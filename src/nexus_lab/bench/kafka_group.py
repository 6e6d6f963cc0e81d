"""Produce -> applied with the consumer group made of gateway processes.

Partitions are how a Kafka consumer group spreads its work: each gateway process (`nexus serve --kafka`)
owns some of them. This module starts `consumers` of them, each a process of its own (`kafka_consumer.py`,
run with `command`: this interpreter, or another checkout's `nexus` first on `PYTHONPATH`), and stops the
clock when the group has committed every record.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.bench.cpu import ProducerProcess, postmaster_pid, tree_cpu_seconds
from nexus_lab.bench.kafka_consumer import SPLIT


class TimedGateway(Gateway):
    """`Gateway.submit` that records how long each call took (one partition slice per call), for the in-process
    Kafka bench (`external.bench_kafka`)."""

    latencies: list[float] = []

    async def submit(self, items: Sequence[Incoming], *, source: str = "http") -> list[Any]:
        t = time.perf_counter()
        try:
            return await super().submit(items, source=source)
        finally:
            TimedGateway.latencies.append(time.perf_counter() - t)


SCRIPT = Path(__file__).resolve().parent / "kafka_consumer.py"
SETTINGS = ("database_url", "kafka_bootstrap", "kafka_topic", "kafka_dlq_topic", "kafka_group", "db_pool_size")
"""What a consumer process is told; the rest of its settings come from its environment (NEXUS_*)."""


class Consumer:
    """One gateway process of the group (`kafka_consumer.py`), started with `command` (a Python)."""

    def __init__(self, command: Sequence[str], settings: Settings, poll: int) -> None:
        fields = {name: getattr(settings, name) for name in SETTINGS}
        self.args = [*command, str(SCRIPT), json.dumps({"settings": fields, "poll": poll})]
        self.proc: asyncio.subprocess.Process | None = None
        self.owned = -1
        self.result: dict[str, Any] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        self._reader = asyncio.create_task(self._read())
        async with asyncio.timeout(120):
            await self._ready.wait()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for line in self.proc.stdout:
            if not line.startswith(b"{"):  # a wrapper's own output (py-spy's, say)
                continue
            message = json.loads(line)
            if "ready" in message:
                self._ready.set()
            elif "owned" in message:
                self.owned = message["owned"]
            else:
                self.result = message

    async def stop(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None and self._reader is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        async with asyncio.timeout(60):
            await self._reader
        async with asyncio.timeout(60):
            await self.proc.wait()
        assert self.result is not None, f"consumer {self.pid} exited {self.proc.returncode} without a result"
        return self.result

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def _settled(members: Sequence[Consumer], partitions: int) -> None:
    """Until every partition is owned and spread evenly: the rebalance the last member's join started is
    over (the first members learn of it only at their next heartbeat)."""
    deadline = time.monotonic() + 60
    while True:
        counts = [m.owned for m in members]
        if min(counts) >= 0 and sum(counts) == partitions and max(counts) - min(counts) <= 1:
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
    command: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Produce `records` to `s.kafka_topic` (already created) while `consumers` gateway processes consume it
    in group `s.kafka_group` into `s.database_url` (fresh and migrated); the clock runs from the first send,
    once every consumer is in the group, to the last commit. `latencies`: lane batches, poll to commit."""
    postmaster = await postmaster_pid(s.database_url or "")
    members = [Consumer(command or [sys.executable], s, poll) for _ in range(consumers)]
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    try:
        await asyncio.gather(*(m.start() for m in members))
        await _settled(members, partitions)
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
        results = await asyncio.gather(*(m.stop() for m in members))
        db = await Database(s).open(migrate=False)
        try:
            applied = await db.fetchval("SELECT count(*) FROM outbox")
        finally:
            await db.close()
        assert applied == len(records), f"{applied} applied of {len(records)}"
    finally:
        await admin.close()
        for m in members:
            with contextlib.suppress(ProcessLookupError):
                await m.kill()
    return {
        "seconds": elapsed,
        "produce_seconds": produce_s,
        "rate": len(records) / elapsed,
        "cpu_consumer_s": sum(r["cpu_s"] for r in results),
        "cpu_producer_s": producer_cpu,
        "cpu_postgres_s": pg_cpu,
        "latencies": [x for r in results for x in r["batches"]],
        "submit_latencies": [x for r in results for x in r["submits"]],
        "split": split_summary([x for r in results for x in r.get("split", [])]),
    }


def split_summary(rows: Sequence[Sequence[float]]) -> dict[str, dict[str, float]]:
    """Where the lane batches' time went (`kafka_consumer.py`, `split`): the mean of each part over every batch
    (`all`) and over the slowest 5 % by poll -> commit (`slowest_5pct`, the p99's neighbourhood); ms, and
    records per batch."""
    if not rows:
        return {}
    slowest = sorted(rows, key=lambda r: sum(r[1:]), reverse=True)[: max(1, len(rows) // 20)]

    def mean(group: Sequence[Sequence[float]]) -> dict[str, float]:
        sums = [sum(r[i] for r in group) / len(group) for i in range(len(SPLIT))]
        out = {"records": round(sums[0], 1), "total_ms": round(sum(sums[1:]) * 1000, 1)}
        out |= {name: round(v * 1000, 1) for name, v in zip(SPLIT[1:], sums[1:], strict=True)}
        return out

    return {"all": mean(rows), "slowest_5pct": mean(slowest), "batches": {"count": len(rows)}}
