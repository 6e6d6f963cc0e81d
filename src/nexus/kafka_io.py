"""Kafka plumbing of the gateway's tools: the producer `nexus dlq redrive` and the decisions relay use, and
reading a topic back.

The producer is `nexus_wire.kafka.Producer` (shared with the SDK's; its docstring says what kind: acks=all,
idempotent, keyed by `order_id`, 256 KiB batches) with the tools' `send`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from nexus.settings import Settings
from nexus_wire.envelope import EventEnvelope
from nexus_wire.kafka import Delivered, Headers, KafkaSecurity, Producer, Record, client_kwargs

Event = EventEnvelope | bytes | str | Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record read back from a topic (for `nexus dlq list` and tests)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, str]
    timestamp_ms: int


def encode_event(event: Event) -> tuple[bytes, bytes | None]:
    """The record value and key (`order_id`, when the event says) of one event."""
    if isinstance(event, EventEnvelope):
        return event.model_dump_json().encode(), event.order_id.encode()
    if isinstance(event, bytes):
        return event, None
    if isinstance(event, str):
        return event.encode(), None
    order_id = event.get("order_id")
    return json.dumps(event, default=str).encode(), str(order_id).encode() if order_id is not None else None


# One producer underneath (nexus_wire.kafka.Producer, shared with the SDK's); this `send` is the tools': any
# record (an envelope, or bytes, text, a mapping as stored), to any topic or partition, built from settings.
class EventProducer(Producer):
    """Publishes agents' steps to the events topic; each `send` waits for the broker's ack (acks=all)."""

    @classmethod
    def from_settings(cls, settings: Settings, *, topic: str | None = None, **kwargs: Any) -> EventProducer:
        """To `topic` (default: the events topic), with the settings' broker, TLS and SASL."""
        return cls(
            settings.kafka_bootstrap, topic or settings.kafka_topic, security=settings.kafka_security(), **kwargs
        )

    async def send(
        self,
        event: Event,
        key: str | bytes | None = None,
        *,
        traceparent: str | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        topic: str | None = None,
    ) -> Delivered:
        """Publish one event and wait for its acknowledgement. `key` defaults to the event's order_id."""
        value, derived_key = encode_event(event)
        return await self.publish(
            Record(value, derived_key if key is None else key, traceparent, headers, partition), topic=topic
        )

    async def send_records(
        self, records: Iterable[tuple[bytes, str, str | None]], *, topic: str | None = None
    ) -> list[Delivered]:
        """Publish (value, key, traceparent) records in order, then wait for every acknowledgement."""
        return await self.publish_all((Record(value, key, tp) for value, key, tp in records), topic=topic)

    async def send_many(self, events: Iterable[Event], *, topic: str | None = None) -> list[Delivered]:
        """Publish events in order, then wait for every acknowledgement (one per event)."""
        return await self.publish_all((Record(*encode_event(e)) for e in events), topic=topic)


async def topic_partitions(bootstrap: str, topic: str, security: KafkaSecurity | None = None) -> list[int]:
    """The partition numbers of `topic` (empty if it does not exist); `security`: None reads the environment."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000, **client_kwargs(security))
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if described.get("error_code", 0) != 0:
        return []
    return sorted(p["partition"] for p in described["partitions"])


async def read_topic(
    bootstrap: str, topic: str, *, limit: int | None = None, security: KafkaSecurity | None = None
) -> list[StoredRecord]:
    """Every record of `topic` from the beginning up to its current end, without joining a group."""
    tps = [TopicPartition(topic, p) for p in await topic_partitions(bootstrap, topic, security)]
    if not tps:
        return []
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **client_kwargs(security))
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        records: list[StoredRecord] = []
        remaining = {tp for tp in tps if ends[tp] > await consumer.position(tp)}
        deadline = asyncio.get_running_loop().time() + 60
        while remaining and asyncio.get_running_loop().time() < deadline:
            batch = await consumer.getmany(*remaining, timeout_ms=1000)
            for tp, msgs in batch.items():
                for m in msgs:
                    if m.offset < ends[tp]:
                        records.append(
                            StoredRecord(
                                m.topic,
                                m.partition,
                                m.offset,
                                m.key,
                                m.value,
                                {k: v.decode("utf-8", "replace") for k, v in (m.headers or ())},
                                m.timestamp,
                            )
                        )
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        records.sort(key=lambda r: (r.timestamp_ms, r.partition, r.offset))
        return records[:limit] if limit is not None else records
    finally:
        await consumer.stop()
