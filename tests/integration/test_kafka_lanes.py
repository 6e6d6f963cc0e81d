"""How far ahead of its lanes the Kafka ingress fetches, against the real broker and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import uuid

import asyncpg
import pytest

from nexus.settings import Settings
from tests.integration.kafka_helpers import (
    kafka_settings,
    outbox_count,
    plan_events,
    produce_plans,
    producer,
    running_ingress,
    wait_committed_to_end,
)

pytestmark = pytest.mark.kafka
__all__ = ["kafka_settings"]  # the fixture, imported for pytest


async def test_a_busy_lane_fetches_at_most_one_batch_ahead_then_catches_up(
    kafka_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """While a lane's batch waits on PostgreSQL longer than the group's poll interval, at most one more batch
    is fetched for it and the consumer keeps its partitions; everything applies afterwards."""
    caplog.set_level(logging.INFO, logger="nexus.ingress.kafka")
    s = kafka_settings.replace(kafka_lanes=1, kafka_max_poll_records=10, kafka_max_poll_interval_ms=6_000)
    prefix = f"ahead-{uuid.uuid4().hex[:6]}"
    blocker = await asyncpg.connect(s.database_url)
    try:
        blocked = blocker.transaction()
        await blocked.start()
        # Every batch reads the orders table: this holds the lane's first batch in its transaction.
        await blocker.execute("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
        async with running_ingress(s) as ingress:
            async with producer(s) as p:
                await produce_plans(p, plan_events(prefix, 30))
            await asyncio.sleep(8)  # past the poll interval, all 150 records in the broker
            assert ingress.resolved_records == 0
            assert ingress.queued_records <= 2 * s.kafka_max_poll_records, ingress.queued_records
            await blocked.rollback()
            await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)
            revoked = [r.args for r in caplog.records if getattr(r, "action", None) == "kafka_revoked"]
            assert revoked in ([], [([],)]), revoked  # (the first join revokes nothing)
        assert await outbox_count(s.database_url or "", prefix) == 150
    finally:
        await blocker.close()
