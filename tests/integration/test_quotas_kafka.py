"""A Kafka record over its tenant's quota goes to the DLQ topic with QUOTA_EXCEEDED, and the stream goes on."""

from __future__ import annotations

import asyncpg
import pytest

from nexus.kafka_io import read_topic
from nexus.settings import Settings
from nexus.store.database import Database
from tests.factories import step_json
from tests.integration.kafka_helpers import BOOTSTRAP, kafka_settings, producer, running_ingress, wait_committed_to_end
from tests.integration.test_quotas import set_quotas

pytestmark = pytest.mark.kafka
__all__ = ["kafka_settings"]  # the fixture, imported for pytest


async def test_a_record_over_a_quota_is_dead_lettered_to_the_topic(kafka_settings: Settings, db: Database) -> None:
    """On a topic bound to acme at a live_orders quota of 2: a third order's record goes to the DLQ topic with
    x-dlq-code QUOTA_EXCEEDED (no order, no dead-letter row), and the records after it still apply."""
    s = kafka_settings.replace(kafka_tenant="acme")
    await set_quotas(db, "acme", live_orders=2)
    async with running_ingress(s):
        async with producer(s) as p:
            await p.send(step_json("k-0", "p-0", 1))
            await p.send(step_json("k-1", "p-1", 1))
        await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)
        async with producer(s) as p:
            await p.send(step_json("k-2", "p-2", 1))
            await p.send(step_json("k-0", "p-0", 2))
            await p.send(step_json("k-1", "p-1", 2))
        await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)
    conn = await asyncpg.connect(s.database_url)
    try:
        orders = await conn.fetch("SELECT order_id, last_seq FROM orders WHERE tenant_id = 'acme' ORDER BY 1")
        dead = await conn.fetchval("SELECT count(*) FROM dead_letters")
    finally:
        await conn.close()
    assert [(r["order_id"], r["last_seq"]) for r in orders] == [("k-0", 2), ("k-1", 2)]
    assert dead == 0
    dlq = await read_topic(BOOTSTRAP, s.kafka_dlq_topic)
    assert [(r.key, r.headers["x-dlq-code"]) for r in dlq] == [(b"k-2", "QUOTA_EXCEEDED")]
    assert "live_orders" in dlq[0].headers["x-dlq-error"]
