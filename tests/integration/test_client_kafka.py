"""The SDK's Kafka producer against the real broker: what a record of a step carries."""

from __future__ import annotations

import re

import pytest

from nexus.kafka_io import read_topic
from nexus.settings import Settings
from nexus_client.kafka import EventProducer
from tests.factories import step
from tests.integration.kafka_helpers import BOOTSTRAP, kafka_settings

__all__ = ["kafka_settings"]

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# Version 00; any trace flags (an installed OpenTelemetry SDK sets 03, sampled + random trace id), sampled.
TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


async def test_steps_are_keyed_by_order_and_carry_a_traceparent(kafka_settings: Settings) -> None:
    """Each produced step is keyed by its order_id and carries a W3C traceparent (the caller's when given)."""
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with EventProducer(BOOTSTRAP, kafka_settings.kafka_topic) as producer:
        first = await producer.send(step("sdkk-o1", "sdkk-p", 1), traceparent=given)
        others = await producer.send_many([step("sdkk-o1", "sdkk-p", 2), step("sdkk-o2", "sdkk-p", 1)])
    assert first.topic == kafka_settings.kafka_topic
    assert {d.partition for d in [first, others[0]]} == {first.partition}  # one order, one partition
    records = await read_topic(BOOTSTRAP, kafka_settings.kafka_topic)
    assert sorted(r.key for r in records) == [b"sdkk-o1", b"sdkk-o1", b"sdkk-o2"]
    assert all(TRACEPARENT.match(r.headers["traceparent"]) for r in records)
    assert all(int(r.headers["traceparent"][-2:], 16) & 1 for r in records), "every record's trace is sampled"
    assert given in {r.headers["traceparent"] for r in records}
