"""A Kafka topic is bound to one tenant (NEXUS_KAFKA_TENANT): records naming another are dead-lettered."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from nexus.settings import Settings
from tests.factories import plan_json, step_json
from tests.integration.kafka_helpers import kafka_settings, producer, running_ingress, wait_committed_to_end

pytestmark = pytest.mark.kafka
__all__ = ["kafka_settings"]  # the fixture, imported for pytest


async def test_records_naming_another_tenant_than_the_topics_are_dead_lettered(kafka_settings: Settings) -> None:
    """On a topic bound to acme: a globex envelope is a TENANT_MISMATCH dead letter and changes nothing;
    envelopes without a tenant (or naming acme) are acme's and apply."""
    s = kafka_settings.replace(kafka_tenant="acme")
    order = f"tenant-{uuid.uuid4().hex[:6]}"
    async with producer(s) as p:
        await p.send(step_json(order, "plan-g", 1, tenant_id="globex"))
        for event in plan_json(order, "plan-a", 2):
            await p.send(event)
    async with running_ingress(s):
        await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)
    conn = await asyncpg.connect(s.database_url)
    try:
        orders = await conn.fetch("SELECT tenant_id, plan_id, last_seq FROM orders WHERE order_id = $1", order)
        dead = await conn.fetch("SELECT source, code, tenant_id FROM dead_letters")
    finally:
        await conn.close()
    assert [(r["tenant_id"], r["plan_id"], r["last_seq"]) for r in orders] == [("acme", "plan-a", 2)]
    assert [(r["source"], r["code"], r["tenant_id"]) for r in dead] == [("kafka", "TENANT_MISMATCH", "acme")]
