"""How many records a Kafka lane puts in one `submit`: sized from its measured time per record."""

from __future__ import annotations

import asyncio
from typing import cast

from nexus.gateway import Gateway
from nexus.ingress.kafka import KafkaIngress
from nexus.ingress.kafka_lanes import Lane
from nexus.settings import Settings


async def _lane(slice_ms: float) -> Lane:
    # The lane's sizing never reaches the gateway, the broker or the database.
    ingress = KafkaIngress(cast(Gateway, None), Settings(kafka_max_poll_records=500, kafka_slice_ms=slice_ms))
    return Lane(ingress, 0)


async def test_a_lane_sizes_its_slices_to_the_time_budget_within_the_floor_and_the_poll_size() -> None:
    """100 records before anything is measured; then what fits in the budget at the moving time per
    record, never fewer than 100 nor more than the poll size."""
    lane = await _lane(100)
    try:
        assert lane.size == 100
        lane.measured(100, 0.05)  # 0.5 ms a record: 200 fit in 100 ms
        assert lane.size == 200
        for _ in range(30):
            lane.measured(100, 0.01)  # 0.1 ms a record: 1,000 would fit
        assert lane.size == 500
        for _ in range(30):
            lane.measured(100, 1.0)  # 10 ms a record: 10 would fit
        assert lane.size == 100
    finally:
        lane.task.cancel()
        await asyncio.gather(lane.task, return_exceptions=True)


async def test_a_budget_of_zero_takes_the_poll_size() -> None:
    """`NEXUS_KAFKA_SLICE_MS=0` turns slicing off: a lane takes up to the poll size, however slow."""
    lane = await _lane(0)
    try:
        lane.measured(100, 1.0)
        assert lane.size == 500
    finally:
        lane.task.cancel()
        await asyncio.gather(lane.task, return_exceptions=True)
