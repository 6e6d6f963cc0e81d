"""A Kafka machine lost: one broker of a three-broker cluster SIGKILLed under load, then restarted."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from nexus_lab.chaos.harness import ChaosSession
from nexus_lab.chaos.kafka_cluster import LAG_ZERO, PARTITIONS, WRITABLE
from tests.chaos.test_chaos_short import run_short

pytestmark = [pytest.mark.slow]


async def _replication(bootstrap: str, topic: str) -> tuple[set[int], str]:
    """The replica counts of `topic`'s partitions and its min.insync.replicas."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
        replicas = {len(p["replicas"]) for p in described[0]["partitions"]}
        configs = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        entries = {entry[0]: entry[1] for entry in configs[0].resources[0][4]}
        return replicas, entries["min.insync.replicas"]
    finally:
        await admin.close()


async def test_broker_kill(chaos_session: ChaosSession) -> None:
    """One broker SIGKILLed while the agent produces and two gateways consume: every partition of the events and
    decisions topics still takes acks=all writes, no acknowledged step is lost or applied twice, and the group's
    lag is back to zero, on topics of three replicas with min.insync.replicas 2."""
    result = await run_short(chaos_session, "broker-kill")
    assert result.faults["broker SIGKILLed"] == 1
    assert result.faults[WRITABLE] == result.faults[PARTITIONS] == 8, result.faults
    assert result.faults["broker restarted"] == 1
    assert result.faults[LAG_ZERO] == 1
    (bootstrap,) = [b for b, c in chaos_session.kafka_clusters.items() if c.started]
    async with asyncio.timeout(30):
        replicas, min_isr = await _replication(bootstrap, "nexus.decisions")
    assert (replicas, min_isr) == ({3}, "2")
