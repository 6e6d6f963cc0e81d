"""Publishing steps to the gateway's Kafka topic.

Producing is where an agent hands a step to the gateway, so the producer is the strict kind: acks=all and
idempotent, and `send` returns only once the broker has acknowledged that one step. Records are keyed by
`order_id`, so every step of an order lands in the same partition and one consumer sees them in order;
each carries a W3C `traceparent` header (a fresh trace unless the caller passes one).
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaProducer

from nexus.core.envelope import EventEnvelope
from nexus_client import _tracing

Headers = list[tuple[str, bytes]]


def new_traceparent() -> str:
    """A W3C traceparent starting a new trace (sampled)."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


@dataclasses.dataclass(frozen=True, slots=True)
class Delivered:
    """Where the broker put one acknowledged record."""

    topic: str
    partition: int
    offset: int


class EventProducer:
    """Publishes steps to the events topic; each `send` waits for the broker's ack (acks=all)."""

    def __init__(self, bootstrap: str, topic: str, *, client_id: str = "nexus-client", linger_ms: int = 0) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, client_id=client_id, acks="all", enable_idempotence=True, linger_ms=linger_ms
        )
        self._started = False

    async def start(self) -> Self:
        await self._producer.start()
        self._started = True
        return self

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._producer.stop()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def send(self, step: EventEnvelope, *, traceparent: str | None = None) -> Delivered:
        """Publish one step (key = its order_id) and wait for its acknowledgement."""
        with _tracing.publish([step], "kafka") as trace_headers:  # issue 16: the agent's publish span
            tp = traceparent or trace_headers.get("traceparent") or new_traceparent()
            fut = await self._enqueue(step.model_dump_json().encode(), step.order_id, tp)
            return _delivered(await fut)

    async def send_many(self, steps: Iterable[EventEnvelope]) -> list[Delivered]:
        """Publish steps in order, then wait for every acknowledgement (one per step)."""
        batch = list(steps)
        with _tracing.publish(batch, "kafka") as trace_headers:
            shared = trace_headers.get("traceparent")
            futures = [
                await self._enqueue(s.model_dump_json().encode(), s.order_id, shared or new_traceparent())
                for s in batch
            ]
            return [_delivered(m) for m in await asyncio.gather(*futures)]

    async def send_raw(
        self, value: bytes, *, key: str | bytes | None, traceparent: str | None = None, headers: Headers | None = None
    ) -> Delivered:
        """Publish bytes as they are (the lab sends malformed ones on purpose) under `key`."""
        fut = await self._enqueue(value, key, traceparent, headers)
        return _delivered(await fut)

    async def _enqueue(
        self, value: bytes, key: str | bytes | None, traceparent: str | None, headers: Headers | None = None
    ) -> asyncio.Future[Any]:
        all_headers = list(headers or [])
        if traceparent is not None:
            all_headers.append(("traceparent", traceparent.encode()))
        fut: asyncio.Future[Any] = await self._producer.send(
            self.topic,
            value=value,
            key=key.encode() if isinstance(key, str) else key,
            headers=all_headers or None,
        )
        return fut


def _delivered(meta: Any) -> Delivered:
    return Delivered(meta.topic, meta.partition, meta.offset)
