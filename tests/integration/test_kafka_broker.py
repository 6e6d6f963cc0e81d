"""Round trip through the real single-node Kafka broker started by ``scripts/kafka.sh up``."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

pytestmark = pytest.mark.kafka

BOOTSTRAP = os.environ.get("NEXUS_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
TOPIC = "nexus.events"


async def _round_trip() -> None:
    key = uuid.uuid4().hex.encode()
    value = b"hello-" + key
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        meta = await producer.send_and_wait(TOPIC, value=value, key=key)
    finally:
        await producer.stop()
    assert meta.topic == TOPIC and meta.offset >= 0

    tp = TopicPartition(TOPIC, meta.partition)
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, meta.offset)
        msg = await asyncio.wait_for(consumer.getone(tp), timeout=20)
    finally:
        await consumer.stop()
    assert (msg.partition, msg.offset, msg.key, msg.value) == (meta.partition, meta.offset, key, value)


def test_produce_acks_all_then_consume_back() -> None:
    """A message produced with acks=all to nexus.events is consumed back unchanged."""
    asyncio.run(_round_trip())
