"""The one Kafka producer of steps, shared by the SDK (`nexus_client.kafka.EventProducer`) and the gateway's
tools (`nexus.kafka_io.EventProducer`), built with the TLS and SASL settings (`KafkaSecurity`, from
`nexus_wire.kafka_security`) every Kafka client takes; needs aiokafka (the `kafka` extra).

Producing is where an agent hands a step to the gateway, so the producer is the strict kind: acks=all and
idempotent, and a send returns only once the broker has acknowledged that one record. Records are keyed by
`order_id`, so every step of an order lands in the same partition and one consumer sees them in order. Batch
callers still get one acknowledgement per record; they only avoid waiting for each before sending the next.

The two `EventProducer`s are this class with two `send`s: the SDK's takes envelopes (its publish span, a
traceparent on every record, no `tenant_id` unless the caller set one, so the key's tenant applies); the
gateway's takes any record (bytes, text, a mapping: dead letters redriven as they were stored, decisions to
another topic, a partition chosen) and is built from the gateway's settings.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaProducer

from nexus_wire.kafka_security import KafkaSecurity, client_kwargs

__all__ = ["BATCH_BYTES", "Client", "Delivered", "Headers", "KafkaSecurity", "Producer", "Record", "client_kwargs"]

Headers = list[tuple[str, bytes]]
BATCH_BYTES = 256 * 1024
"""Per-partition batch limit. aiokafka keeps one produce request in flight per broker, with at most one batch
per partition, so a partition carries `max_batch_size` per round trip; its default of 16 KiB held one partition
to ~35 records per round trip. 256 KiB stays under the broker's 1 MiB message.max.bytes."""


@dataclasses.dataclass(frozen=True, slots=True)
class Delivered:
    """Where the broker put one acknowledged record."""

    topic: str
    partition: int
    offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One record to publish: its value, key, and headers (a traceparent is a header like the others)."""

    value: bytes
    key: str | bytes | None = None
    traceparent: str | None = None
    headers: Headers | None = None
    partition: int | None = None


class Client:
    """A Kafka client with `start` and `stop`, usable as `async with` (the producer, the SDK's decisions reader)."""

    async def start(self) -> Self:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


class Producer(Client):
    """An acks=all, idempotent producer to `topic` (or another topic per call)."""

    CLIENT_ID = "nexus-producer"
    """The client id the broker logs when the caller names none."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        client_id: str | None = None,
        linger_ms: int = 0,
        max_batch_size: int = BATCH_BYTES,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id=client_id or self.CLIENT_ID,
            acks="all",
            enable_idempotence=True,
            linger_ms=linger_ms,
            max_batch_size=max_batch_size,
            **client_kwargs(security),
        )
        self._started = False

    async def start(self) -> Self:
        try:
            await self._producer.start()
        except BaseException:  # refused (a wrong password), unreachable: its connections closed all the same
            await self._producer.stop()
            raise
        self._started = True
        return self

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._producer.stop()

    async def publish(self, record: Record, *, topic: str | None = None) -> Delivered:
        """Publish one record and wait for its acknowledgement."""
        return _delivered(await (await self.enqueue(record, topic=topic)))

    async def publish_all(self, records: Iterable[Record], *, topic: str | None = None) -> list[Delivered]:
        """Publish records in order, then wait for every acknowledgement (one per record)."""
        futures: Sequence[asyncio.Future[Any]] = [await self.enqueue(r, topic=topic) for r in records]
        return [_delivered(meta) for meta in await asyncio.gather(*futures)]

    async def enqueue(self, record: Record, *, topic: str | None = None) -> asyncio.Future[Any]:
        """Hand one record to the client; the future resolves with its acknowledgement."""
        headers = list(record.headers or [])
        if record.traceparent is not None:
            headers.append(("traceparent", record.traceparent.encode()))
        key = record.key.encode() if isinstance(record.key, str) else record.key
        fut: asyncio.Future[Any] = await self._producer.send(
            topic or self.topic, value=record.value, key=key, partition=record.partition, headers=headers or None
        )
        return fut


def _delivered(meta: Any) -> Delivered:
    return Delivered(meta.topic, meta.partition, meta.offset)
