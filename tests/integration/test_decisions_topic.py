"""Every decision on a Kafka-ingested step reaches `nexus.decisions` (real Kafka, real `nexus serve
--kafka`), even when the gateway is SIGKILLed between the commit of the decisions and their produce."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nexus.kafka_io import EventProducer, read_topic
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.kafka_admin import delete_topics, ensure_topics
from tests.factories import replan_json, step_json
from tests.helpers import wait_until
from tests.integration.kafka_helpers import BOOTSTRAP, kafka_settings

pytestmark = pytest.mark.slow
__all__ = ["kafka_settings"]

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
async def decisions_settings(kafka_settings: Settings) -> AsyncIterator[Settings]:
    topic = f"{kafka_settings.kafka_topic}.decisions"
    await ensure_topics(BOOTSTRAP, [topic], partitions=2)
    yield kafka_settings.replace(decisions_topic=topic, decisions_relay_poll_s=0.05)
    with contextlib.suppress(Exception):
        await delete_topics(BOOTSTRAP, [topic])


def records_of(order: str) -> list[dict[str, Any]]:
    """A plan with a duplicate, a gap filled late, a REPLAN and an old-plan straggler."""
    s1, s2, s3 = (step_json(order, "pa", n) for n in (1, 2, 3))
    return [s1, s3, s1, s2, replan_json(order, "pa", "pb"), step_json(order, "pa", 4), step_json(order, "pb", 4)]


async def test_decisions_survive_a_kill_between_commit_and_produce(
    decisions_settings: Settings,
    start_gateway,
    nexus_procs,
    db: Database,  # type: ignore[no-untyped-def]
) -> None:
    """Decisions committed but not yet produced (relay idle) when the gateway is SIGKILLed: a restarted
    gateway relays every one (key order_id, value the HTTP result + order_id + tenant, traceparent header)."""
    decisions_settings = decisions_settings.replace(kafka_tenant="acme")  # the topic's tenant (NEXUS_KAFKA_TENANT)
    idle = decisions_settings.replace(decisions_relay_poll_s=3600.0)  # the relay looks once, at start, then sleeps
    gateway, _ = start_gateway("--kafka", "--no-dispatcher", settings_=idle)
    orders = [f"o-dec-{uuid.uuid4().hex[:6]}" for _ in range(4)]
    sent = [body for order in orders for body in records_of(order)]
    async with EventProducer(BOOTSTRAP, decisions_settings.kafka_topic) as producer:
        for body in sent:
            await producer.send(body, body["order_id"], traceparent=TRACEPARENT)

    async def all_decided() -> bool:
        return bool(await db.fetchval("SELECT count(*) FROM decisions_outbox WHERE tenant_id = 'acme'") == len(sent))

    await wait_until(all_decided, 60, "every record decided and its decision committed", interval=0.1)
    assert await read_topic(BOOTSTRAP, decisions_settings.decisions_topic) == []  # the window: committed, unsent
    gateway.kill()
    start_gateway("--kafka", "--no-dispatcher", settings_=decisions_settings)

    async def all_relayed() -> bool:
        return bool(await db.fetchval("SELECT count(*) FROM decisions_outbox") == 0)

    await wait_until(all_relayed, 60, "the restarted relay emptied the decisions outbox", interval=0.1)
    records = await read_topic(BOOTSTRAP, decisions_settings.decisions_topic)
    values = [json.loads(r.value or b"{}") for r in records]
    assert {v["event_id"] for v in values} == {b["event_id"] for b in sent}  # none missing (duplicates allowed)
    for record, value in zip(records, values, strict=True):
        assert record.key == value["order_id"].encode() and value["tenant"] == "acme"
        assert record.headers.get("traceparent") == TRACEPARENT
        assert {"event_id", "decision", "code", "order"} <= set(value)
    first = next(o for o in orders)
    ordered = [(v["decision"], v["code"]) for v in values if v["order_id"] == first]
    assert ordered[:7] == [
        ("APPLY", None),
        ("BUFFER", None),
        ("DUPLICATE", None),
        ("APPLY", None),
        ("APPLY", None),
        ("DISCARD", "PLAN_SUPERSEDED"),
        ("APPLY", None),
    ]


async def test_the_agents_kafka_transport_learns_each_decision(decisions_settings: Settings, start_gateway) -> None:  # type: ignore[no-untyped-def]
    """The lab's KafkaTransport, reading nexus.decisions through the SDK, acks each step with its decision."""
    from nexus.core.envelope import parse_envelope
    from nexus_lab.agent.hostile_messages import Message
    from nexus_lab.agent.transport import KafkaTransport
    from nexus_wire.codes import Decision

    start_gateway("--kafka", "--no-dispatcher", settings_=decisions_settings)
    order = f"o-agent-{uuid.uuid4().hex[:6]}"
    transport = await KafkaTransport(
        BOOTSTRAP, decisions_settings.kafka_topic, decisions_topic=decisions_settings.decisions_topic
    ).start()
    got = []
    try:
        for body in records_of(order):
            envelope = parse_envelope(body)
            message = Message(
                body=json.dumps(body).encode(),
                key=order,
                envelope=envelope,
                mode=None,
                honest=True,
                expected=Decision.APPLY,
                expected_code=None,
                event_id=str(envelope.event_id),
                event_type=str(envelope.event_type),
                seq_id=envelope.seq_id,
                plan_id=envelope.plan_id,
            )
            ack = await transport.send(message)
            got.append((ack.decision, ack.code, ack.order_last_seq))
    finally:
        await transport.close()
    assert got == [
        ("APPLY", None, 1),
        ("BUFFER", None, 1),
        ("DUPLICATE", None, 1),
        ("APPLY", None, 3),
        ("APPLY", None, 3),
        ("DISCARD", "PLAN_SUPERSEDED", 3),
        ("APPLY", None, 4),
    ]
