"""Idle saga executors wake on `nexus_sagas` notifications and at the next due time, not at their poll."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.saga.executor import SagaExecutor
from nexus.store.database import Database
from nexus_lab.services import RunningServices, start_services
from tests.factories import step_json
from tests.integration.test_sagas import saga_settings

POLL_S = 30.0  # far longer than any wait below: only a wake-up can make the work happen in time


@pytest.fixture
async def services() -> AsyncIterator[RunningServices]:
    running = await start_services()
    yield running
    await running.aclose()


async def _status_within(db: Database, order: str, status: str, timeout_s: float) -> float:
    started = time.monotonic()
    while await db.fetchval("SELECT status FROM orders WHERE order_id = $1", order) != status:
        assert time.monotonic() - started < timeout_s, f"{order} not {status} within {timeout_s} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def _running_executor(
    database_url: str, services: RunningServices, **overrides: float
) -> tuple[Database, Gateway, asyncio.Task[None]]:
    settings = saga_settings(database_url, services, saga_poll_s=POLL_S, **overrides)
    db = await Database(settings).open(migrate=False)
    gateway = Gateway(db, catalog=builtin_catalog())
    executor = SagaExecutor(db, gateway, settings, "wakeups")
    task = asyncio.create_task(executor.run(1))
    assert executor.wakeups is not None
    await asyncio.wait_for(executor.wakeups.connected.wait(), 10)
    await asyncio.sleep(0.3)  # its first look found nothing: it is asleep now
    return db, gateway, task


async def _stop(db: Database, task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await db.close()


async def test_a_recorded_step_wakes_an_idle_executor_at_once(database_url: str, services: RunningServices) -> None:
    """With a 30 s poll, a step recorded with an effect is performed within seconds: the transaction that
    recorded it notified `nexus_sagas`, and the executor listening woke."""
    db, gateway, task = await _running_executor(database_url, services)
    try:
        await gateway.submit([Incoming.parse(step_json("w1", "p-w1", s, process="fulfilment")) for s in (1, 2)])
        assert await _status_within(db, "w1", "inventory_validated", 5.0) < 5.0
    finally:
        await _stop(db, task)


async def test_a_retry_happens_after_its_backoff_not_after_the_poll(
    database_url: str, services: RunningServices
) -> None:
    """A call refused transiently (503) is retried after its backoff (milliseconds) although no notification
    comes: the idle executor sleeps until the next due time it read, not the 30 s poll."""
    # A backoff long enough that the executor's look right after the failure finds nothing due yet.
    db, gateway, task = await _running_executor(database_url, services, saga_retry_base_ms=400, saga_retry_max_ms=400)
    try:
        services.services.faults["inventory"].down = True
        await gateway.submit([Incoming.parse(step_json("w2", "p-w2", s, process="fulfilment")) for s in (1, 2)])
        while not services.services.ledgers["inventory"].attempts:
            await asyncio.sleep(0.01)
        services.services.faults["inventory"].down = False
        assert await _status_within(db, "w2", "inventory_validated", 5.0) < 5.0
    finally:
        await _stop(db, task)
