"""How the agent hands a message to the gateway: HTTP (default) or Kafka. A one-method port.

`send(message)` returns an `Ack` once the transport has acknowledged the message, or raises
`PublishError`. What counts as acknowledged:

- HTTP: a 2xx, and a 4xx whose body carries `results` (the gateway recorded the message as a dead letter:
  an invalid envelope is 422/400, a plan mismatch 409). A 5xx, a 4xx without results, or a transport
  error is a failure; 503 and transport errors are retried with exponential backoff a few times first
  (safe: resending an event the gateway already applied is answered DUPLICATE).
- Kafka: the broker's acknowledgement (acks=all). The gateway decides later: with `decisions_topic`
  the transport then reads the decision from `nexus.decisions` (the SDK's `DecisionsReader`)
  and the Ack carries it; without, or for a message with no valid envelope (dead-lettered at ingress,
  never published there), the Ack has no decision.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from nexus_client import AsyncNexusClient, ClientConfig, ClientError
from nexus_lab.agent.hostile_messages import Message
from nexus_wire.backoff import Jitter, RetryPolicy


class PublishError(Exception):
    """The transport did not acknowledge a message; the plan cannot go on."""


@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    """The transport's acknowledgement of one message, with the gateway's answer when it gives one."""

    decision: str | None = None
    code: str | None = None
    http_status: int | None = None
    order_status: str | None = None
    order_last_seq: int | None = None
    attempts: int = 1
    partition: int | None = None
    offset: int | None = None
    approval_id: str | None = None
    """A HELD step's approval (what the lab approver answers)."""


class Transport(Protocol):
    name: str

    async def send(self, message: Message) -> Ack: ...

    async def close(self) -> None: ...


class HttpTransport:
    """POSTs one envelope per request to `{gateway_url}/v1/events`, through the SDK's HTTP client."""

    name = "http"

    def __init__(
        self,
        gateway_url: str | None = None,
        *,
        timeout_s: float = 10.0,
        retries: int = 4,
        backoff_s: float = 0.2,
        max_connections: int = 64,
        api_key: str | None = None,
    ) -> None:
        # Doubling from backoff_s, uncapped within the retries asked for (the chaos agent waits ~50 s).
        retry = RetryPolicy(
            base_ms=backoff_s * 1000.0,
            max_ms=backoff_s * 1000.0 * 2**retries,
            max_attempts=retries + 1,
            jitter=Jitter.NONE,
        )
        config = ClientConfig.from_env(
            gateway_url=gateway_url,
            timeout_s=timeout_s,
            retry=retry,
            max_connections=max_connections,
            api_key=api_key,
        )
        self.gateway_url = config.gateway_url
        self.url = config.url("/v1/events")
        self._client = AsyncNexusClient(config)

    async def send(self, message: Message) -> Ack:
        try:
            result = await self._client.submit_raw(message.body)
        except ClientError as exc:
            raise PublishError(f"gateway did not acknowledge event {message.event_id}: {exc}") from exc
        first = result.results[0] if result.results else None
        order = first.order if first is not None else None
        return Ack(
            decision=first.decision.value if first is not None else None,
            code=first.code if first is not None else None,
            http_status=result.http_status,
            order_status=order.status if order is not None else None,
            order_last_seq=order.last_seq if order is not None else None,
            attempts=result.attempts,
            approval_id=first.approval_id if first is not None else None,
        )

    async def close(self) -> None:
        await self._client.aclose()


class KafkaTransport:
    """Produces each message to the events topic, keyed by order_id, and waits for the broker's ack."""

    name = "kafka"

    def __init__(
        self, bootstrap: str, topic: str, *, decisions_topic: str | None = None, decision_timeout_s: float = 30.0
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.decisions_topic = decisions_topic
        self.decision_timeout_s = decision_timeout_s
        self._producer: Any = None
        self._decisions: Any = None

    async def start(self) -> KafkaTransport:
        from nexus_client.kafka import EventProducer  # aiokafka is only needed on this path

        producer = EventProducer(self.bootstrap, self.topic, client_id="nexus-agent")
        try:
            await producer.start()
        except Exception as exc:
            await producer.stop()
            raise PublishError(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc
        self._producer = producer
        if self.decisions_topic is not None:
            from nexus_client.kafka import DecisionsReader

            try:
                self._decisions = await DecisionsReader(self.bootstrap, self.decisions_topic).start()
            except Exception as exc:
                await producer.stop()
                raise PublishError(f"cannot read {self.decisions_topic} at {self.bootstrap}: {exc}") from exc
        return self

    async def send(self, message: Message) -> Ack:
        if self._producer is None:
            raise PublishError("KafkaTransport.start() first")
        try:
            delivered = await self._producer.send_raw(message.body, key=message.key)
        except Exception as exc:
            raise PublishError(f"broker did not acknowledge event {message.event_id}: {exc}") from exc
        if self._decisions is None or message.envelope is None or not message.event_id:
            return Ack(partition=delivered.partition, offset=delivered.offset)
        value = await self._decisions.decision_of(message.event_id, self.decision_timeout_s)
        if value is None:
            raise PublishError(f"no decision about event {message.event_id} within {self.decision_timeout_s}s")
        order = value.get("order") or {}
        return Ack(
            decision=value.get("decision"),
            code=value.get("code"),
            order_status=order.get("status"),
            order_last_seq=order.get("last_seq"),
            partition=delivered.partition,
            offset=delivered.offset,
            approval_id=value.get("approval_id"),
        )

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        if self._decisions is not None:
            await self._decisions.stop()
            self._decisions = None
