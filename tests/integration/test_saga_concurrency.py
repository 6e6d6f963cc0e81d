"""The executor works the effects of different orders concurrently, at most
`saga_max_inflight_per_service` calls in flight to one service, each saga's own steps still in order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from nexus.audit.verify import load, verify
from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.saga.executor import SagaExecutor
from nexus.store.database import Database
from nexus_lab.services import Faults, RunningServices, start_services
from tests.factories import step_json
from tests.integration.test_sagas import saga_settings

LATENCY_MS = 150.0
ORDERS = 8


@pytest.fixture
async def slow_services() -> AsyncIterator[RunningServices]:
    running = await start_services(Faults(latency_ms=LATENCY_MS))
    yield running
    await running.aclose()


async def _run_to_completion(database_url: str, services: RunningServices, per_service: int) -> float:
    """Submit ORDERS whole fulfilment plans, run one executor until every order is completed; seconds taken."""
    return (await _run_executor(database_url, services, per_service))[0]


async def _run_executor(database_url: str, services: RunningServices, per_service: int) -> tuple[float, int]:
    """As `_run_to_completion`; also how many transactions wrote the calls' outcomes."""
    settings = saga_settings(database_url, services, saga_max_inflight_per_service=per_service, saga_poll_s=0.05)
    db = await Database(settings).open(migrate=False)
    gateway = Gateway(db, catalog=builtin_catalog())
    executor = SagaExecutor(db, gateway, settings, "concurrent")
    started = time.monotonic()
    for i in range(ORDERS):
        await gateway.submit([Incoming.parse(step_json(f"c{i}", f"p-c{i}", s, process="fulfilment"))
                              for s in range(1, 6)])  # fmt: skip
    # Started once every order is recorded: its first claim takes all eight, so their calls start (and their
    # answers arrive) together, however slowly a loaded machine lets the submissions above go.
    task = asyncio.create_task(executor.run(ORDERS))
    try:
        while await db.fetchval("SELECT count(*) FROM orders WHERE status = 'completed'") < ORDERS:
            assert time.monotonic() - started < 30, "the orders did not complete within 30 s"
            await asyncio.sleep(0.02)
        return time.monotonic() - started, executor.outcomes.batches
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await db.close()


async def test_effects_of_different_orders_run_concurrently_bounded_per_service(
    database_url: str, slow_services: RunningServices
) -> None:
    """Eight orders' four effects each, every answer 150 ms late, at most 3 calls per service: each service
    sees exactly 3 calls at once (never more), and the whole run takes far less than one order after another
    (8 x 4 x 150 ms = 4.8 s)."""
    elapsed = await _run_to_completion(database_url, slow_services, per_service=3)
    seen = {name: ledger.max_inflight for name, ledger in slow_services.services.ledgers.items()}
    assert seen == {name: 3 for name in seen}, seen
    assert elapsed < 4.8 * 0.6, elapsed


async def test_one_sagas_steps_keep_their_order_under_concurrency(
    database_url: str, slow_services: RunningServices
) -> None:
    """With many sagas worked at once, each order's effects reach the services in its steps' order:
    its reservation before its charge before its shipment before its invoice."""
    await _run_to_completion(database_url, slow_services, per_service=8)
    ledgers = slow_services.services.ledgers
    for i in range(ORDERS):
        times = [next(e["at"] for e in ledgers[s].entries if e["order_id"] == f"c{i}")
                 for s in ("inventory", "payment", "shipping", "invoice")]  # fmt: skip
        assert times == sorted(times), (i, times)


async def test_outcomes_of_different_sagas_share_transactions(
    database_url: str, slow_services: RunningServices
) -> None:
    """Eight sagas worked at once write their 32 outcomes in fewer transactions than outcomes, yet each
    service saw each order's call once and the decision log of every order verifies."""
    _, batches = await _run_executor(database_url, slow_services, per_service=8)
    assert batches < ORDERS * 4, batches
    for ledger in slow_services.services.ledgers.values():
        orders = [e["order_id"] for e in ledger.entries]
        assert sorted(orders) == sorted(f"c{i}" for i in range(ORDERS)), orders
    db = await Database(saga_settings(database_url, slow_services)).open(migrate=False)
    try:
        records, checkpoints, _ = await load(db)
    finally:
        await db.close()
    result = verify(records, checkpoints)
    assert result.finding is None and result.chains >= ORDERS, result


async def test_sagas_on_a_hanging_service_never_hold_more_tasks_than_its_call_slots(
    database_url: str, slow_services: RunningServices
) -> None:
    """Twelve sagas whose reservation hangs past the call timeout, at most 3 calls per service: the sagas
    beyond the 3 slots get no task, they are released by the statement after their claim and claimed again
    when due, so until every saga was called twice the executor never runs more than 3 tasks (counted)."""
    slow_services.services.faults["inventory"].hang_rate = 1.0
    slow_services.services.faults["inventory"].hang_ms = 2_000
    settings = saga_settings(database_url, slow_services, saga_max_inflight_per_service=3, saga_poll_s=0.05,
                             saga_call_timeout_s=0.3, saga_breaker_threshold=1000, saga_max_attempts=1000)  # fmt: skip
    db = await Database(settings).open(migrate=False)
    gateway = Gateway(db, catalog=builtin_catalog())
    executor = SagaExecutor(db, gateway, settings, "hanging")
    orders = 12
    for i in range(orders):
        await gateway.submit([Incoming.parse(step_json(f"h{i}", f"p-h{i}", s, process="fulfilment"))
                              for s in (1, 2)])  # fmt: skip
    task = asyncio.create_task(executor.run(64))
    try:
        ledger = slow_services.services.ledgers["inventory"]
        started = time.monotonic()
        while len(ledger.attempts) < orders or min(ledger.attempts.values()) < 2:
            assert time.monotonic() - started < 60, "not every saga was called twice within 60 s"
            await asyncio.sleep(0.05)
        assert 1 <= executor.tasks_peak <= 3, executor.tasks_peak
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await db.close()
