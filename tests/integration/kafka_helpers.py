"""Helpers for tests against the real Kafka broker: private topics per test, an in-process consumer,
offsets read from the broker, and the final state of plans read from PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from nexus.gateway import Gateway
from nexus.ingress.kafka import KafkaIngress
from nexus.kafka_io import EventProducer
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.kafka_admin import delete_topics, ensure_topics
from tests.factories import plan_json
from tests.helpers import wait_until

BOOTSTRAP = os.environ.get("NEXUS_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
PARTITIONS = 4


@pytest.fixture
async def kafka_settings(settings: Settings) -> AsyncIterator[Settings]:
    """Test settings with a topic, DLQ topic and consumer group of this test's own (deleted afterwards)."""
    tag = uuid.uuid4().hex[:10]
    s = settings.replace(
        kafka_bootstrap=BOOTSTRAP,
        kafka_topic=f"nexus.events.t{tag}",
        kafka_dlq_topic=f"nexus.events.t{tag}.dlq",
        kafka_group=f"nexus-gateway-t{tag}",
    )
    await ensure_topics(BOOTSTRAP, [s.kafka_topic, s.kafka_dlq_topic], partitions=PARTITIONS)
    yield s
    with contextlib.suppress(Exception):
        await delete_topics(BOOTSTRAP, [s.kafka_topic, s.kafka_dlq_topic])


@contextlib.asynccontextmanager
async def running_ingress(settings: Settings, gateway: type[Gateway] = Gateway) -> AsyncIterator[KafkaIngress]:
    """A KafkaIngress in this event loop, with its own pool; waits for its first assignment. `gateway`: the
    class of its gateway (a subclass that injects a fault)."""
    db = await Database(settings).open(migrate=False)
    ingress = KafkaIngress(gateway(db, record_plan_mismatch=False), settings)
    task = asyncio.create_task(ingress.run())
    try:
        await asyncio.wait_for(ingress.assigned.wait(), 30)
        yield ingress
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await db.close()


@contextlib.asynccontextmanager
async def producer(settings: Settings) -> AsyncIterator[EventProducer]:
    async with EventProducer.from_settings(settings) as p:
        yield p


def plan_events(prefix: str, n: int) -> list[list[dict[str, Any]]]:
    """`n` complete five-step plans whose orders are named `prefix-0000`..."""
    return [plan_json(f"{prefix}-{i:04d}", f"plan-{prefix}-{i}") for i in range(n)]


async def produce_plans(
    p: EventProducer,
    plans: list[list[dict[str, Any]]],
    *,
    concurrency: int = 50,
    tolerate: bool = False,
    pace_s: float = 0.0,
) -> None:
    """Publish each plan's steps in order, one ack awaited per event, many plans at once.

    With `tolerate`, a send that fails (broker restarting) is sent again until acknowledged, as an agent
    would: the record may then exist twice, which the gateway answers with DUPLICATE. `pace_s` sleeps
    after each event so that a run lasts long enough to be interrupted in the middle.
    """
    queue = list(reversed(plans))

    async def worker() -> None:
        while queue:
            for event in queue.pop():
                while True:
                    try:
                        await p.send(event)
                        break
                    except KafkaError:
                        if not tolerate:
                            raise
                        await asyncio.sleep(0.5)
                if pace_s:
                    await asyncio.sleep(pace_s)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def group_state(group: str) -> tuple[str, int]:
    """The consumer group's state (e.g. Stable) and number of members, from the broker."""
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=10_000)
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    [described] = response.to_object()["groups"]
    return described["state"], len(described["members"])


async def outbox_count(database_url: str, prefix: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM outbox WHERE order_id LIKE $1", f"{prefix}-%")
        return count
    finally:
        await conn.close()


async def committed_offsets(group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition of `topic`, read from the broker."""
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=10_000)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic and meta.offset >= 0}


async def end_offsets(topic: str) -> dict[int, int]:
    """The end (next offset) of every partition of `topic`."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {tp.partition: off for tp, off in ends.items()}


async def wait_committed_to_end(group: str, topic: str, timeout: float = 60) -> None:
    async def done() -> bool:
        ends = await end_offsets(topic)
        committed = await committed_offsets(group, topic)
        return all(committed.get(p, 0) == end for p, end in ends.items())

    await wait_until(done, timeout, f"group {group} to commit the end of {topic}", interval=0.2)
