"""The Kafka ingress under failure, with real processes: SIGKILL, PostgreSQL down, a rebalance, a broker
restart. Each ends with the same proof read from PostgreSQL: every plan completed, one outbox row per
step, in order, and nothing refused by the outbox's unique keys (which a second application would hit)."""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest

from nexus import metrics
from nexus.settings import Settings
from tests.conftest import ROOT, PostgresForTests
from tests.helpers import assert_plans_completed_once, wait_until
from tests.integration.kafka_helpers import (
    committed_offsets,
    end_offsets,
    group_state,
    kafka_settings,
    outbox_count,
    plan_events,
    produce_plans,
    producer,
    running_ingress,
    wait_committed_to_end,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
__all__ = ["kafka_settings"]  # the fixture, imported for pytest

PLANS = 200
PACE_S = 0.02  # ~500 events/s: a run lasts ~2 s, long enough to interrupt it in the middle


def prefix(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


async def test_sigkill_mid_run_redelivers_what_was_not_committed(
    kafka_settings: Settings,
    start_gateway,  # type: ignore[no-untyped-def]
) -> None:
    """A consumer SIGKILLed mid-run leaves records uncommitted; its successor gets them and applies each step once."""
    s = kafka_settings
    name = prefix("kill")
    first, _ = start_gateway("--kafka", "--no-dispatcher", settings_=s)
    async with producer(s) as p:
        sending = asyncio.create_task(produce_plans(p, plan_events(name, PLANS), concurrency=10, pace_s=PACE_S))
        await wait_until(lambda: _applied(s, name, PLANS), 60, "a fifth of the steps applied", interval=0.2)
        first.kill()
        committed = sum((await committed_offsets(s.kafka_group, s.kafka_topic)).values())
        await sending
    assert committed < PLANS * 5, "the kill left records for Kafka to redeliver"

    start_gateway("--kafka", "--no-dispatcher", settings_=s)
    await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=90)
    await assert_plans_completed_once(s.database_url or "", name, PLANS)


async def test_postgres_outage_is_retried_in_place(kafka_settings: Settings, pg: PostgresForTests) -> None:
    """With PostgreSQL down ~10 s the consumer retries in place, commits nothing further, and finishes afterwards."""
    s = kafka_settings
    before_outage, during_outage = prefix("pgup"), prefix("pgdown")
    retries_before = _retries()
    async with running_ingress(s), producer(s) as p:
        await produce_plans(p, plan_events(before_outage, PLANS // 2))
        await wait_committed_to_end(s.kafka_group, s.kafka_topic)
        await asyncio.to_thread(pg.stop_server)
        try:
            await produce_plans(p, plan_events(during_outage, PLANS // 2))
            await wait_until(
                lambda: _retried_beyond(retries_before), 30, "the consumer to retry in place", interval=0.2
            )
            held = await committed_offsets(s.kafka_group, s.kafka_topic)
            several_more = _retries() + 3
            await wait_until(lambda: _retried_beyond(several_more - 1), 60, "several more retries", interval=0.2)
            assert await committed_offsets(s.kafka_group, s.kafka_topic) == held, "nothing committed while down"
            ends = await end_offsets(s.kafka_topic)
            assert sum(ends.values()) - sum(held.values()) == PLANS // 2 * 5, "the outage's records wait"
            assert _retries() > retries_before
        finally:
            await asyncio.to_thread(pg.resume)
        await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=90)
    await assert_plans_completed_once(s.database_url or "", before_outage, PLANS // 2)
    await assert_plans_completed_once(s.database_url or "", during_outage, PLANS // 2)


async def test_rebalance_after_a_member_dies_applies_no_step_twice(
    kafka_settings: Settings,
    start_gateway,  # type: ignore[no-untyped-def]
) -> None:
    """Two consumers share the group; one is SIGKILLed mid-run and the survivor takes its partitions over."""
    s = kafka_settings
    name = prefix("rebalance")
    start_gateway("--kafka", "--no-dispatcher", settings_=s)
    doomed, _ = start_gateway("--kafka", "--no-dispatcher", settings_=s)
    await wait_until(lambda: _group_is(s.kafka_group, 2), 60, "both consumers in the group", interval=0.2)
    async with producer(s) as p:
        sending = asyncio.create_task(produce_plans(p, plan_events(name, PLANS), concurrency=10, pace_s=PACE_S))
        await wait_until(lambda: _applied(s, name, PLANS), 60, "a fifth of the steps applied", interval=0.2)
        doomed.kill()
        committed = sum((await committed_offsets(s.kafka_group, s.kafka_topic)).values())
        await sending
    assert committed < PLANS * 5, "the member died mid-run"
    await wait_until(lambda: _group_is(s.kafka_group, 1), 60, "the dead member to leave the group", interval=0.2)
    await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=90)
    await assert_plans_completed_once(s.database_url or "", name, PLANS)


async def test_broker_restart_mid_run_loses_and_doubles_nothing(
    kafka_settings: Settings,
    start_gateway,  # type: ignore[no-untyped-def]
) -> None:
    """The broker restarts while plans are being produced and consumed; the same consumer process finishes them."""
    s = kafka_settings
    name = prefix("broker")
    consumer, _ = start_gateway("--kafka", "--no-dispatcher", settings_=s)
    async with producer(s) as p:
        sending = asyncio.create_task(
            produce_plans(p, plan_events(name, PLANS), concurrency=10, tolerate=True, pace_s=PACE_S)
        )
        await wait_until(lambda: _applied(s, name, PLANS), 60, "a fifth of the steps applied", interval=0.2)
        assert not sending.done(), "the broker restarts mid-run"
        restart = await asyncio.to_thread(
            subprocess.run, ["bash", "scripts/kafka.sh", "restart"], cwd=ROOT, capture_output=True, timeout=120
        )
        assert restart.returncode == 0, restart.stderr.decode()
        await asyncio.wait_for(sending, 120)
    await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=120)
    await assert_plans_completed_once(s.database_url or "", name, PLANS)
    assert consumer.proc is not None and consumer.proc.poll() is None, "the consumer survived the restart"


async def _applied(s: Settings, name: str, rows: int) -> bool:
    return await outbox_count(s.database_url or "", name) >= rows


async def _group_is(group: str, members: int) -> bool:
    state, count = await group_state(group)
    return state == "Stable" and count == members


def _retries() -> float:
    return metrics.REGISTRY.get_sample_value("nexus_consumer_retries_total") or 0.0


async def _retried_beyond(count: float) -> bool:
    return _retries() > count
