"""Kafka through TLS and SASL: the SASL_SSL listener `scripts/kafka.sh up` adds (a CA of its own, PLAIN and
SCRAM-SHA-512), reached by the gateway's consumer, DLQ producer and reader and by the SDK's clients."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from pathlib import Path

import pytest
from aiokafka.errors import KafkaError

from nexus.kafka_io import read_topic
from nexus.settings import Settings
from nexus_client.kafka import DecisionsReader, EventProducer
from nexus_wire.envelope import EventEnvelope
from nexus_wire.kafka import KafkaSecurity
from tests.conftest import ROOT
from tests.factories import plan_json
from tests.helpers import wait_until
from tests.integration.kafka_helpers import BOOTSTRAP, kafka_settings, running_ingress

pytestmark = pytest.mark.kafka

__all__ = ["kafka_settings"]  # the fixture, imported for pytest


def tls_dir() -> Path:
    """The broker's TLS directory: `scripts/kafka.sh` keeps it beside the node of the PLAINTEXT port."""
    home = Path(os.environ.get("NEXUS_KAFKA_HOME") or ROOT / ".cache" / "kafka")
    return home / f"node-{BOOTSTRAP.rsplit(':', 1)[1]}" / "tls"


def client_env() -> dict[str, str]:
    """The NEXUS_KAFKA_* settings of a client of the SASL_SSL listener, as `scripts/kafka.sh up` wrote them."""
    path = tls_dir() / "client.env"
    assert path.is_file(), f"{path} is missing: the broker has no SASL_SSL listener yet (run scripts/kafka.sh up)"
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {k: v for k, v in pairs}


def secured(settings: Settings, mechanism: str, **changes: str) -> Settings:
    env = client_env()
    values = {
        "kafka_bootstrap": env["NEXUS_KAFKA_BOOTSTRAP"],
        "kafka_security_protocol": "SASL_SSL",
        "kafka_sasl_mechanism": mechanism,
        "kafka_sasl_username": env["NEXUS_KAFKA_SASL_USERNAME"],
        "kafka_sasl_password": env["NEXUS_KAFKA_SASL_PASSWORD"],
        "kafka_ssl_cafile": env["NEXUS_KAFKA_SSL_CAFILE"],
    }
    return settings.replace(**{**values, **changes})


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_a_plan_sent_through_the_sasl_ssl_listener_is_applied_and_a_poison_record_dead_lettered(
    kafka_settings: Settings, mechanism: str
) -> None:
    """Over TLS and SASL (PLAIN, then SCRAM-SHA-512 with a client certificate): the SDK's producer (reading the
    NEXUS_KAFKA_* environment's way) sends a plan and a poison record, the gateway's consumer applies the plan,
    its DLQ producer dead-letters the record, `nexus dlq`'s reader and the SDK's DecisionsReader read them."""
    certificate = {}
    if mechanism == "SCRAM-SHA-512":
        certificate = {
            "kafka_ssl_certfile": str(tls_dir() / "client.pem"),
            "kafka_ssl_keyfile": str(tls_dir() / "client.key"),
        }
    s = secured(kafka_settings, mechanism, **certificate)
    env = {f"NEXUS_{k.upper()}": str(v) for k, v in s.model_dump().items() if k.startswith("kafka_") and v is not None}
    security = KafkaSecurity.from_env(env)
    order = f"sasl-{uuid.uuid4().hex[:6]}"
    steps = plan_json(order, f"plan-{order}")
    async with running_ingress(s):
        reader = await DecisionsReader(s.kafka_bootstrap, s.kafka_topic, security=security).start()
        try:
            async with EventProducer(s.kafka_bootstrap, s.kafka_topic, security=security) as producer:
                await producer.send_many(EventEnvelope.model_validate(e) for e in steps)
                await producer.send_raw(b"not json", key=order)
            seen = await reader.decision_of(steps[0]["event_id"], timeout=30)
        finally:
            await reader.stop()
        assert seen is not None and seen["order_id"] == order

        async def applied() -> bool:
            return await _status(s, order) == "completed"

        await wait_until(applied, 30, "the plan applied", interval=0.2)
        dead = await read_topic(s.kafka_bootstrap, s.kafka_dlq_topic, security=s.kafka_security())
    assert [(r.key, r.value, r.headers.get("x-dlq-code")) for r in dead] == [
        (order.encode(), b"not json", "PARSE_ERROR")
    ]


async def _status(settings: Settings, order: str) -> str | None:
    from nexus.store.database import Database

    db = await Database(settings).open(migrate=False)
    try:
        return await db.fetchval("SELECT status FROM orders WHERE order_id = $1", order)
    finally:
        await db.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_a_wrong_password_is_refused(
    kafka_settings: Settings, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's producer with the right user but a wrong password never starts: the broker refuses it."""
    caplog.set_level(logging.DEBUG, logger="aiokafka")  # a lab command run in-process may have quietened it
    s = secured(kafka_settings, mechanism, kafka_sasl_password="not-the-password")  # noqa: S106 - a wrong one
    producer = EventProducer(s.kafka_bootstrap, s.kafka_topic, security=s.kafka_security())
    with pytest.raises(KafkaError) as refused:
        async with asyncio.timeout(60):
            await producer.start()
    assert "Authentication failed" in f"{refused.value} {caplog.text}", refused.value  # the broker's answer
    right = secured(kafka_settings, mechanism)
    async with EventProducer(right.kafka_bootstrap, right.kafka_topic, security=right.kafka_security()) as ok:
        delivered = await ok.send_raw(json.dumps({"probe": 1}).encode(), key="probe")
    assert delivered.offset >= 0
