"""How the agent hands a message to the gateway: HTTP (default) or Kafka. A one-method port.

`send(message)` returns an `Ack` once the transport has acknowledged the message, or raises
`PublishError`. What counts as acknowledged:

- HTTP: a 2xx, and a 4xx whose body carries `results` (the gateway recorded the message as a dead letter:
  an invalid envelope is 422/400, a plan mismatch 409). A 5xx, a 4xx without results, or a transport
  error is a failure; 503 and transport errors are retried with exponential backoff a few times first
  (safe: resending an event the gateway already applied is answered DUPLICATE).
- Kafka: the broker's acknowledgement (acks=all). The gateway decides later, so the Ack has no decision.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import Any, Protocol

import httpx

from nexus.agent.hostile import Message


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


class Transport(Protocol):
    name: str

    async def send(self, message: Message) -> Ack: ...

    async def close(self) -> None: ...


def api_key_from_env() -> str | None:
    """The one place the lab reads its API key: NEXUS_API_KEY (sent as `Authorization: Bearer`)."""
    return os.environ.get("NEXUS_API_KEY") or None


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


class HttpTransport:
    """POSTs one envelope per request to `{gateway_url}/v1/events`."""

    name = "http"

    def __init__(
        self,
        gateway_url: str,
        *,
        timeout_s: float = 10.0,
        retries: int = 4,
        backoff_s: float = 0.2,
        max_connections: int = 64,
        api_key: str | None = None,
    ) -> None:
        self.url = gateway_url.rstrip("/") + "/v1/events"
        self.retries = retries
        self.backoff_s = backoff_s
        self._client = httpx.AsyncClient(
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            headers=auth_headers(api_key if api_key is not None else api_key_from_env()),
        )

    async def send(self, message: Message) -> Ack:
        last_error = "no attempt"
        for attempt in range(1, self.retries + 2):
            try:
                response = await self._client.post(
                    self.url, content=message.body, headers={"content-type": "application/json"}
                )
            except httpx.TransportError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            else:
                ack = _ack_of(response, attempt)
                if ack is not None:
                    return ack
                last_error = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code != 503:
                    break
            if attempt <= self.retries:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
        raise PublishError(f"gateway did not acknowledge event {message.event_id}: {last_error}")

    async def close(self) -> None:
        await self._client.aclose()


def _ack_of(response: httpx.Response, attempt: int) -> Ack | None:
    if response.status_code >= 500:
        return None
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    results = body.get("results") if isinstance(body, dict) else None
    if response.status_code >= 400 and not results:
        return None
    first: dict[str, Any] = results[0] if results else {}
    order = first.get("order") or {}
    return Ack(
        decision=first.get("decision"),
        code=first.get("code"),
        http_status=response.status_code,
        order_status=order.get("status"),
        order_last_seq=order.get("last_seq"),
        attempts=attempt,
    )


class KafkaTransport:
    """Produces each message to the events topic, keyed by order_id, and waits for the broker's ack."""

    name = "kafka"

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._producer: Any = None

    async def start(self) -> KafkaTransport:
        from nexus.kafka_io import EventProducer  # aiokafka is only needed on this path

        producer = EventProducer(self.bootstrap, self.topic, client_id="nexus-agent")
        try:
            await producer.start()
        except Exception as exc:
            await producer.stop()
            raise PublishError(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc
        self._producer = producer
        return self

    async def send(self, message: Message) -> Ack:
        if self._producer is None:
            raise PublishError("KafkaTransport.start() first")
        try:
            delivered = await self._producer.send(message.body, key=message.key)
        except Exception as exc:
            raise PublishError(f"broker did not acknowledge event {message.event_id}: {exc}") from exc
        return Ack(partition=delivered.partition, offset=delivered.offset)

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
