"""Kafka plumbing of the gateway's tools: the producer `nexus dlq redrive` uses, and reading a topic back.

Producing is where an agent hands a step to the gateway, so the producer is the strict kind: acks=all and
idempotent, and `send` returns only once the broker has acknowledged that one event. Records are keyed by
`order_id`, so every step of an order lands in the same partition and one consumer sees them in order.
Batch callers (`send_many`) still get one acknowledgement per event; they only avoid waiting for each
acknowledgement before sending the next.

aiokafka keeps one produce request in flight per broker, carrying at most one batch per partition, so a
partition's throughput is `max_batch_size` per round trip: the default (`BATCH_BYTES`, 256 KiB, under the
broker's 1 MiB message.max.bytes) lets records pile up into one batch while the previous one is acknowledged,
where aiokafka's own 16 KiB held a partition to ~35 records per round trip.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from nexus.core.envelope import EventEnvelope
from nexus.settings import Settings

Event = EventEnvelope | bytes | str | Mapping[str, Any]
Headers = list[tuple[str, bytes]]
BATCH_BYTES = 256 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Delivered:
    """Where the broker put one acknowledged record."""

    topic: str
    partition: int
    offset: int


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


def _key_bytes(key: str | bytes | None) -> bytes | None:
    return key.encode() if isinstance(key, str) else key


class EventProducer:
    """Publishes agents' steps to the events topic; each `send` waits for the broker's ack (acks=all)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        client_id: str = "nexus-producer",
        linger_ms: int = 0,
        max_batch_size: int = BATCH_BYTES,
    ) -> None:
        self.topic = topic
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            acks="all",
            enable_idempotence=True,
            linger_ms=linger_ms,
            max_batch_size=max_batch_size,
        )
        self._started = False

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> EventProducer:
        return cls(settings.kafka_bootstrap, settings.kafka_topic, **kwargs)

    async def start(self) -> EventProducer:
        await self._producer.start()
        self._started = True
        return self

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._producer.stop()

    async def __aenter__(self) -> EventProducer:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

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
        fut = await self._enqueue(event, key, traceparent, headers, partition, topic)
        meta = await fut
        return Delivered(meta.topic, meta.partition, meta.offset)

    async def send_records(
        self, records: Iterable[tuple[bytes, str, str | None]], *, topic: str | None = None
    ) -> list[Delivered]:
        """Publish (value, key, traceparent) records in order, then wait for every acknowledgement."""
        futures = [
            await self._enqueue(value, key, traceparent, None, None, topic) for value, key, traceparent in records
        ]
        metas = await asyncio.gather(*futures)
        return [Delivered(m.topic, m.partition, m.offset) for m in metas]

    async def send_many(self, events: Iterable[Event], *, topic: str | None = None) -> list[Delivered]:
        """Publish events in order, then wait for every acknowledgement (one per event)."""
        futures = [await self._enqueue(e, None, None, None, None, topic) for e in events]
        metas = await asyncio.gather(*futures)
        return [Delivered(m.topic, m.partition, m.offset) for m in metas]

    async def _enqueue(
        self,
        event: Event,
        key: str | bytes | None,
        traceparent: str | None,
        headers: Headers | None,
        partition: int | None,
        topic: str | None,
    ) -> asyncio.Future[Any]:
        value, derived_key = encode_event(event)
        all_headers = list(headers or [])
        if traceparent is not None:
            all_headers.append(("traceparent", traceparent.encode()))
        fut: asyncio.Future[Any] = await self._producer.send(
            topic or self.topic,
            value=value,
            key=_key_bytes(key) if key is not None else derived_key,
            partition=partition,
            headers=all_headers or None,
        )
        return fut


async def topic_partitions(bootstrap: str, topic: str) -> list[int]:
    """The partition numbers of `topic` (empty if it does not exist)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if described.get("error_code", 0) != 0:
        return []
    return sorted(p["partition"] for p in described["partitions"])


async def read_topic(bootstrap: str, topic: str, *, limit: int | None = None) -> list[StoredRecord]:
    """Every record of `topic` from the beginning up to its current end, without joining a group."""
    tps = [TopicPartition(topic, p) for p in await topic_partitions(bootstrap, topic)]
    if not tps:
        return []
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
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
