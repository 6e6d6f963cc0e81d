"""The Kafka ingress's dead-letter topic: what can never work is produced there with its original bytes and key,
and `x-dlq-*` headers saying why and where from (why: `nexus.ingress.kafka`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.errors import KafkaError

from nexus import metrics
from nexus.core.decide.answers import Outcome
from nexus.core.decide.items import Incoming
from nexus.errors import ErrorCode
from nexus.ingress.kafka_lanes import retry_policy
from nexus.retrying import Retrying
from nexus.settings import Settings

log = logging.getLogger("nexus.ingress.kafka")  # the ingress's one logger: its parts log under its name

_MAX_ERROR_HEADER = 1000


def dlq_headers(record: Any, code: ErrorCode, error: str) -> list[tuple[str, bytes]]:
    """The `x-dlq-*` headers of a dead-lettered record; the original headers are kept after them."""
    headers = [
        ("x-dlq-code", code.value.encode()),
        ("x-dlq-error", error[:_MAX_ERROR_HEADER].encode()),
        ("x-dlq-source-topic", record.topic.encode()),
        ("x-dlq-source-partition", str(record.partition).encode()),
        ("x-dlq-source-offset", str(record.offset).encode()),
    ]
    headers.extend((k, v) for k, v in (record.headers or ()) if not k.startswith("x-dlq-"))
    return headers


def dead_reason(item: Incoming, outcome: Outcome) -> tuple[ErrorCode, str]:
    code = outcome.code or ErrorCode.INVALID_EVENT
    if outcome.error:  # the fold's reason (core/wording.py), the same words at every door
        return code, outcome.error
    return code, code.value


async def dead_letter(producer: Any, settings: Settings, dead: list[tuple[Any, Incoming, Outcome]]) -> None:
    """Produce each record to the DLQ topic and wait for every ack, retrying in place until acked."""
    waiting = list(dead)
    retrying = Retrying(retry_policy(settings))
    while waiting:
        sends = []
        for record, item, outcome in waiting:
            code, error = dead_reason(item, outcome)
            sends.append(_send(producer, settings.kafka_dlq_topic, record, code, error))
        results = await asyncio.gather(*sends, return_exceptions=True)
        failed = []
        for entry, result in zip(waiting, results, strict=True):
            if isinstance(result, BaseException):
                if not isinstance(result, KafkaError):
                    raise result
                failed.append(entry)
            else:
                metrics.DLQ_MESSAGES.labels(code=result.value).inc()
                record, _, _ = entry
                log.info(
                    "dead-lettered to kafka",
                    extra={
                        "action": "kafka_dlq",
                        "code": result.value,
                        "partition": record.partition,
                        "offset": record.offset,
                        "event_id": entry[1].event_id,
                    },
                )
        waiting = failed
        if waiting:
            metrics.CONSUMER_RETRIES.inc()
            await retrying.wait()


async def _send(producer: Any, topic: str, record: Any, code: ErrorCode, error: str) -> ErrorCode:
    fut = await producer.send(
        topic,
        value=record.value,
        key=record.key,
        headers=dlq_headers(record, code, error),
    )
    await fut
    return code
