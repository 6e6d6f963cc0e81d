"""REJECTED over Kafka (real broker): each code is recorded, the offset committed, nothing goes to the DLQ,
and a corrected step after a rejection applies."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from nexus.kafka_io import read_topic
from nexus.settings import Settings
from tests.factories import plan_json, step_json
from tests.integration.kafka_helpers import BOOTSTRAP, kafka_settings, producer, running_ingress, wait_committed_to_end

pytestmark = pytest.mark.slow
__all__ = ["kafka_settings"]  # the fixture, imported for pytest


async def test_each_code_over_kafka(kafka_settings: Settings) -> None:
    """Skipped step, invented type, wrong amount, wrong currency, over the limit and after completion are
    REJECTED with their codes; the order completes with its valid steps; the DLQ stays empty."""
    s = kafka_settings
    order, big = f"kr-{uuid.uuid4().hex[:6]}", f"kb-{uuid.uuid4().hex[:6]}"
    s1, s2, s3, s4, s5 = plan_json(order, "p", 5)
    wrong = [
        step_json(order, "p", 2, event_type="PaymentProcessed", data={"amount": 10, "currency": "USD"}),
        step_json(order, "p", 2, event_type="OrderTeleported"),
        step_json(order, "p", 3, data={"amount": 11, "currency": "USD"}),
        step_json(order, "p", 3, data={"amount": 10, "currency": "EUR"}),
    ]
    after = step_json(order, "p", 6, event_type="OrderShipped")
    over = step_json(
        big,
        "p",
        1,
        data={
            "items": [{"product_id": "x", "quantity": 2, "unit_price": 60000}],
            "total_amount": 120000,
            "currency": "USD",
        },
    )
    async with producer(s) as p:
        for event in [s1, wrong[0], wrong[1], s2, wrong[2], wrong[3], s3, s4, s5, after, over]:
            await p.send(event)
    async with running_ingress(s):
        await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)
    conn = await asyncpg.connect(s.database_url)
    try:
        rows = await conn.fetch("SELECT event_id::text, code, check_id FROM rejected_events")
        status = await conn.fetchval("SELECT status FROM orders WHERE order_id = $1", order)
        notified = await conn.fetchval("SELECT count(*) FROM outbox WHERE order_id = $1", order)
        big_order = await conn.fetchval("SELECT count(*) FROM orders WHERE order_id = $1", big)
    finally:
        await conn.close()
    got = {r["event_id"]: (r["code"], r["check_id"]) for r in rows}
    assert got == {
        wrong[0]["event_id"]: ("INVALID_TRANSITION", None),
        wrong[1]["event_id"]: ("UNKNOWN_STEP", None),
        wrong[2]["event_id"]: ("CHECK_FAILED", "payment_amount_matches_order"),
        wrong[3]["event_id"]: ("CHECK_FAILED", "payment_currency_matches_order"),
        after["event_id"]: ("AFTER_TERMINAL", None),
        over["event_id"]: ("LIMIT_EXCEEDED", "order_within_limit"),
    }
    assert (status, notified, big_order) == ("completed", 5, 0)
    assert await read_topic(BOOTSTRAP, s.kafka_dlq_topic) == []
