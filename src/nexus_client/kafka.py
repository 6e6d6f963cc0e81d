"""Publishing steps to the gateway's Kafka topic.

Producing is where an agent hands a step to the gateway, so the producer is the strict kind: acks=all and
idempotent, and `send` returns only once the broker has acknowledged that one step. Records are keyed by
`order_id`, so every step of an order lands in the same partition and one consumer sees them in order;
each carries a W3C `traceparent` header (a fresh trace unless the caller passes one).

TLS and SASL: both clients take `security=KafkaSecurity(...)`; without it they read the same variables as the
gateway (`NEXUS_KAFKA_SECURITY_PROTOCOL`, `NEXUS_KAFKA_SASL_MECHANISM`, `NEXUS_KAFKA_SASL_USERNAME`,
`NEXUS_KAFKA_SASL_PASSWORD`, `NEXUS_KAFKA_SSL_CAFILE`, `NEXUS_KAFKA_SSL_CERTFILE`, `NEXUS_KAFKA_SSL_KEYFILE`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any, Self

from nexus_client import _tracing
from nexus_client._protocol import envelope_json
from nexus_wire.envelope import EventEnvelope
from nexus_wire.kafka import BATCH_BYTES, Client, Delivered, Headers, KafkaSecurity, Producer, Record, client_kwargs
from nexus_wire.trace import new_traceparent

__all__ = [
    "BATCH_BYTES",
    "DecisionsReader",
    "Delivered",
    "EventProducer",
    "Headers",
    "KafkaSecurity",
    "new_traceparent",
]


# One producer underneath (nexus_wire.kafka.Producer, shared with the gateway's tools); this `send` is the
# agent's: envelopes, a publish span, a traceparent on every record, and the key's tenant unless one is set.
class EventProducer(Producer):
    """Publishes steps to the events topic; each `send` waits for the broker's ack (acks=all)."""

    CLIENT_ID = "nexus-client"

    async def send(self, step: EventEnvelope, *, traceparent: str | None = None) -> Delivered:
        """Publish one step (key = its order_id) and wait for its acknowledgement."""
        with _tracing.publish([step], "kafka") as trace_headers:  # The agent's publish span
            tp = traceparent or trace_headers.get("traceparent") or new_traceparent()
            return await self.publish(Record(envelope_json(step), step.order_id, tp))

    async def send_many(self, steps: Iterable[EventEnvelope]) -> list[Delivered]:
        """Publish steps in order, then wait for every acknowledgement (one per step)."""
        batch = list(steps)
        with _tracing.publish(batch, "kafka") as trace_headers:
            shared = trace_headers.get("traceparent")
            return await self.publish_all(
                Record(envelope_json(s), s.order_id, shared or new_traceparent()) for s in batch
            )

    async def send_raw(
        self, value: bytes, *, key: str | bytes | None, traceparent: str | None = None, headers: Headers | None = None
    ) -> Delivered:
        """Publish bytes as they are (the lab sends malformed ones on purpose) under `key`."""
        return await self.publish(Record(value, key, traceparent, headers))


class DecisionsReader(Client):
    """Reads the gateway's `nexus.decisions` topic: what it decided about each Kafka-sent step.

    Starts at the topic's end (decisions about steps sent from now on), without a consumer group. A record's
    value is the step's HTTP result plus `order_id` and `tenant`; duplicates may come (the gateway relays
    at least once). The same event_id sent twice is decided twice: `decision_of` hands out an event_id's
    decisions in the order they were published, one per call (a relayed duplicate, after a gateway crash,
    may be handed out for a later resend).
    """

    def __init__(
        self, bootstrap: str, topic: str = "nexus.decisions", *, security: KafkaSecurity | None = None
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.security = security
        """TLS and SASL (`nexus_wire.kafka_security`); None: from the `NEXUS_KAFKA_*` environment."""
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None
        self._seen: dict[str, list[dict[str, Any]]] = {}
        self._arrived = asyncio.Condition()

    async def start(self) -> Self:
        from aiokafka import AIOKafkaConsumer

        # No group: every partition is assigned to this reader once the topic's metadata arrives.
        consumer = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, enable_auto_commit=False, **client_kwargs(self.security)
        )
        await consumer.start()
        loop = asyncio.get_running_loop()
        until = loop.time() + 10.0
        while not consumer.assignment():
            if loop.time() > until:
                await consumer.stop()
                raise RuntimeError(f"topic {self.topic} has no partitions")
            await asyncio.sleep(0.05)
        tps = sorted(consumer.assignment())
        await consumer.seek_to_end(*tps)
        for tp in tps:  # pin the end now: decisions committed after start are all read
            await consumer.position(tp)
        self._consumer = consumer
        self._task = asyncio.create_task(self._read(), name="decisions-reader")
        return self

    async def _read(self) -> None:
        import json

        async for record in self._consumer:
            try:
                value = json.loads(record.value or b"")
            except ValueError:
                continue
            if isinstance(value, dict) and value.get("event_id"):
                async with self._arrived:
                    self._seen.setdefault(str(value["event_id"]), []).append(value)
                    self._arrived.notify_all()

    async def decision_of(self, event_id: str, timeout: float = 30.0) -> dict[str, Any] | None:  # noqa: ASYNC109 - a deadline for the whole wait, as the HTTP client's
        """The gateway's decision about `event_id` (waiting up to `timeout` s for it), or None."""

        async def seen() -> dict[str, Any]:
            async with self._arrived:
                await self._arrived.wait_for(lambda: bool(self._seen.get(event_id)))
                return self._seen[event_id].pop(0)

        try:
            async with asyncio.timeout(timeout):
                return await seen()
        except TimeoutError:
            return None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
