"""The bench's producer publishes as agents do: every step keyed by its order_id.

Unkeyed, the steps of one order were scattered over the partitions, reached the gateway out of order and
were buffered: the Kafka bench then measured buffering, and its CPU per event grew with the partitions.
"""

from __future__ import annotations

import uuid
from collections import defaultdict

import pytest

from nexus.kafka_io import read_topic
from nexus.settings import Settings
from nexus_lab.bench.cpu import produce
from nexus_lab.bench.scenarios import make_plans
from tests.integration.kafka_helpers import BOOTSTRAP, kafka_settings

__all__ = ["kafka_settings"]

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def test_each_orders_steps_share_a_partition_in_their_order(kafka_settings: Settings) -> None:
    """20 five-step plans on 4 partitions: each order's records carry its key, share a partition, in seq order."""
    plans = make_plans(f"bk-{uuid.uuid4().hex[:6]}", 20)
    records = [(e.order_id.encode(), e.model_dump_json().encode()) for plan in plans for e in plan]
    await produce(kafka_settings, records)
    stored = await read_topic(BOOTSTRAP, kafka_settings.kafka_topic)
    assert len(stored) == len(records)
    partitions: dict[bytes, set[int]] = defaultdict(set)
    seqs: dict[bytes, list[int]] = defaultdict(list)
    for r in sorted(stored, key=lambda r: (r.partition, r.offset)):
        assert r.key is not None and r.value is not None
        partitions[r.key].add(r.partition)
        seqs[r.key].append(int(r.value.split(b'"seq_id":', 1)[1].split(b",", 1)[0]))
    assert len(partitions) == 20
    assert all(len(p) == 1 for p in partitions.values()), partitions
    assert all(s == [1, 2, 3, 4, 5] for s in seqs.values()), seqs
    assert len({p for ps in partitions.values() for p in ps}) > 1  # the orders do spread over partitions
